/* Mixture of experts (docs/MODEL.md §5.8): fp32 softmax router over all E experts, top-k (ties: lower
 * expert id), renormalised weights, SwiGLU experts, plus the shared expert scaled by a sigmoid
 * scalar gate. */
#include "cpu/layers.h"

#include <math.h>
#include <string.h>

/* Top-k of p[0..E) by (p desc, index asc) into idx[0..k). */
static void top_k(const float *p, int64_t E, int64_t k, int64_t *idx) {
    for (int64_t s = 0; s < k; s++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t q = 0; q < s && !taken; q++) taken = idx[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e; /* strict >: lower id wins ties */
        }
        idx[s] = best;
    }
}

/* One SwiGLU MLP on T tokens: down(silu(gate·x) ⊙ up·x). gate/up rows start at row0 (an expert's
 * slice of a 3-D tensor); a fused gate_up tensor holds gate rows then up rows per expert. each: every
 * token as its own product (ts_cpu_matmul_each), bit-identical to T calls of one token. */
static void swiglu(ts_cpu_work *w, const ts_gguf_tensor *gate, const ts_gguf_tensor *up,
                   const ts_gguf_tensor *down, int64_t e, int64_t F, const float *x, int64_t T, bool each,
                   float *out) {
    const int64_t H = w->m->hp.n_embd;
    float *g = w->gu, *u = w->gu + T * F;
    const ts_gguf_tensor *um = up ? up : gate; /* fused [H, 2F, E]: expert e's rows 2F·e … gate first */
    const int64_t g0 = up ? e * F : e * 2 * F, u0 = up ? e * F : e * 2 * F + F;
    if (each) {
        ts_cpu_matmul_each(gate, g0, F, x, T, g);
        ts_cpu_matmul_each(um, u0, F, x, T, u);
    } else {
        ts_cpu_matmul(gate, g0, F, x, T, g);
        ts_cpu_matmul(um, u0, F, x, T, u);
    }
    for (int64_t i = 0; i < T * F; i++) g[i] = ts_silu(g[i]) * u[i];
    if (each)
        ts_cpu_matmul_each(down, e * H, H, g, T, out);
    else
        ts_cpu_matmul(down, e * H, H, g, T, out);
}

/* The router's choice for one token, to the recorder (ts_cpu_choice): its k experts best first and the
 * logit margin between the k-th and the best expert not chosen, ln(p_k / p_{k+1}). */
static void record_route(const ts_cpu_work *w, uint32_t l, int64_t row, const float *p, int64_t E, int64_t k,
                         const int64_t *sel) {
    float next = -1;
    for (int64_t e = 0; e < E; e++) {
        bool taken = false;
        for (int64_t s = 0; s < k && !taken; s++) taken = sel[s] == e;
        if (!taken && p[e] > next) next = p[e];
    }
    int seq;
    int64_t pos;
    ts_cpu_row_position(w, row, &seq, &pos);
    ts_cpu_choice(TS_CPU_CHOICE_ROUTER, (int)l, seq, pos, next < 0 ? 0.0f : logf(p[sel[k - 1]]) - logf(next),
                  k, sel);
}

/* The routed experts of tokens x[0..T) (T ≤ MOE_GROUP; rows row0 … of the micro-batch), added to y.
 * Every expert runs once for all the tokens that chose it (its weights read once), each token as its
 * own product; a token's k outputs are then added in its routing order: the numbers of one token at a
 * time. */
static void experts(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, int64_t row0, const float *x,
                    int64_t T, float *y) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used, F = hp->n_ff_exp[l];
    const ts_gguf_tensor *gate = L->ffn_gate_exps ? L->ffn_gate_exps : L->ffn_gate_up_exps;
    int64_t *sel = w->moe_idx, *pair = sel + T * k, *tok = pair + T * k, *off = tok + T * k; /* off: E + 1 */

    /* routing: fp32 softmax over all experts, top-k, weights renormalised over the k */
    ts_cpu_matmul_each(L->ffn_gate_inp, 0, E, x, T, w->router);
    const bool record = ts_cpu_choices_on();
    for (int64_t t = 0; t < T; t++) {
        float *p = w->router + t * E, mx = -INFINITY, sum = 0;
        for (int64_t e = 0; e < E; e++) mx = fmaxf(mx, p[e]);
        for (int64_t e = 0; e < E; e++) sum += (p[e] = expf(p[e] - mx));
        for (int64_t e = 0; e < E; e++) p[e] /= sum;
        top_k(p, E, k, sel + t * k);
        if (record) record_route(w, l, row0 + t, p, E, k, sel + t * k);
        float wsum = 0;
        for (int64_t s = 0; s < k; s++) wsum += p[sel[t * k + s]];
        for (int64_t s = 0; s < k; s++) w->moe_w[t * k + s] = p[sel[t * k + s]] / wsum;
    }

    /* the (token, rank) pairs sorted by expert (counting sort): expert e's are off[e] … off[e+1]−1 */
    for (int64_t e = 0; e <= E; e++) off[e] = 0;
    for (int64_t i = 0; i < T * k; i++) off[sel[i] + 1]++;
    for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
    for (int64_t i = 0; i < T * k; i++) pair[i] = off[sel[i]]++, tok[pair[i]] = i / k;
    for (int64_t e = E; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;

    for (int64_t e = 0; e < E; e++) {
        const int64_t n = off[e + 1] - off[e];
        if (n == 0) continue;
        for (int64_t i = 0; i < n; i++)
            memcpy(w->xg + i * H, x + tok[off[e] + i] * H, (size_t)H * sizeof(float));
        swiglu(w, gate, L->ffn_up_exps, L->ffn_down_exps, e, F, w->xg, n, true, w->eo + off[e] * H);
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t s = 0; s < k; s++) {
            const float we = w->moe_w[t * k + s], *eo = w->eo + pair[t * k + s] * H;
            for (int64_t i = 0; i < H; i++) y[t * H + i] += we * eo[i];
        }
}

void ts_cpu_moe(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const float *x, int64_t T, float *y) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd;

    /* shared expert for all T tokens at once, scaled by σ(gate_inp_shexp · x) */
    swiglu(w, L->ffn_gate_shexp, L->ffn_up_shexp, L->ffn_down_shexp, 0, hp->n_ff_shexp, x, T, false, y);
    const float *sg = ts_cpu_f32(L->ffn_gate_inp_shexp, w->vec);
    for (int64_t t = 0; t < T; t++) {
        float s = 0;
        for (int64_t i = 0; i < H; i++) s += sg[i] * x[t * H + i];
        const float gs = ts_sigmoid(s);
        for (int64_t i = 0; i < H; i++) y[t * H + i] *= gs;
    }
    for (int64_t t0 = 0; t0 < T; t0 += MOE_GROUP)
        experts(w, L, l, t0, x + t0 * H, T - t0 < MOE_GROUP ? T - t0 : MOE_GROUP, y + t0 * H);
}
