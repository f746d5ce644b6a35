/* Hyper-connections (docs/MODEL.md §5.2): read C normalised streams into one block input, write the block
 * output back into every stream with its inject weight. */
#include "cpu/layers.h"

/* Per token: Xn = grouped_rmsnorm(R; g); d = silu(Dn·Xn / C); M = σ(Up·d);
 * x = mean_s(M_s ⊙ Xn_s); inj_s = 2σ((Inj·Xn)_s / C). inj may be NULL (final mixer). The three products
 * never take TURBOSPARK_CPU_ROUND_X's rounding: CUDA runs them in fp32 (split-K and fused SIMT kernels). */
void ts_cpu_hc_read(ts_cpu_work *w, const ts_hc_weights *hc, const float *R, int64_t T, float *x,
                    float *inj) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, r = hp->hc_rank;
    const float *g = ts_cpu_f32(hc->norm, w->vec);
    for (int64_t t = 0; t < T; t++) ts_cpu_rmsnorm(R + t * W, g, W, H, hp->eps, w->xn + t * W);
    ts_cpu_matmul_unrounded(hc->down, 0, r, w->xn, T, w->lr);
    for (int64_t i = 0; i < T * r; i++) w->lr[i] = ts_silu(w->lr[i] / (float)C);
    ts_cpu_matmul_unrounded(hc->up, 0, W, w->lr, T, w->mix);
    for (int64_t t = 0; t < T; t++) {
        const float *M = w->mix + t * W, *Xn = w->xn + t * W;
        for (int64_t i = 0; i < H; i++) {
            float s = 0;
            for (int64_t c = 0; c < C; c++) s += ts_sigmoid(M[c * H + i]) * Xn[c * H + i];
            x[t * H + i] = s / (float)C;
        }
    }
    if (!inj) return;
    ts_cpu_matmul_unrounded(hc->inject, 0, C, w->xn, T, inj);
    for (int64_t i = 0; i < T * C; i++) inj[i] = 2.0f * ts_sigmoid(inj[i] / (float)C);
}

/* R_s += y ⊙ inj_s for every stream s (the un-normalised streams). */
void ts_cpu_hc_write(const ts_hparams *hp, float *R, const float *y, const float *inj, int64_t T) {
    const int64_t H = hp->n_embd, C = hp->hc_count;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            float *Rs = R + (t * C + c) * H;
            const float k = inj[t * C + c];
            for (int64_t i = 0; i < H; i++) Rs[i] += y[t * H + i] * k;
        }
}
