/* Mixture of experts (spec §5.8): fp32 softmax router over all E experts, top-k (ties: lower
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
 * slice of a 3-D tensor); a fused gate_up tensor holds gate rows then up rows per expert. */
static void swiglu(ts_cpu_work *w, const ts_gguf_tensor *gate, const ts_gguf_tensor *up, const ts_gguf_tensor *down,
                   int64_t e, int64_t F, const float *x, int64_t T, float *out) {
    const int64_t H = w->m->hp.n_embd;
    float *g = w->gu, *u = w->gu + T * F;
    if (up) {
        ts_cpu_matmul(gate, e * F, F, x, T, g);
        ts_cpu_matmul(up, e * F, F, x, T, u);
    } else { /* fused [H, 2F, E]: expert e's rows 2F·e … gate first */
        ts_cpu_matmul(gate, e * 2 * F, F, x, T, g);
        ts_cpu_matmul(gate, e * 2 * F + F, F, x, T, u);
    }
    for (int64_t i = 0; i < T * F; i++) g[i] = ts_silu(g[i]) * u[i];
    ts_cpu_matmul(down, e * H, H, g, T, out);
}

void ts_cpu_moe(ts_cpu_work *w, const ts_layer_weights *L, uint32_t l, const float *x, int64_t T, float *y) {
    const ts_hparams *hp = &w->m->hp;
    const int64_t H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used, F = hp->n_ff_exp[l];
    const ts_gguf_tensor *gate = L->ffn_gate_exps ? L->ffn_gate_exps : L->ffn_gate_up_exps;
    int64_t idx[64];

    /* shared expert for all T tokens at once, scaled by σ(gate_inp_shexp · x) */
    swiglu(w, L->ffn_gate_shexp, L->ffn_up_shexp, L->ffn_down_shexp, 0, hp->n_ff_shexp, x, T, y);
    const float *sg = ts_cpu_f32(L->ffn_gate_inp_shexp, w->vec);
    for (int64_t t = 0; t < T; t++) {
        float s = 0;
        for (int64_t i = 0; i < H; i++) s += sg[i] * x[t * H + i];
        const float gs = ts_sigmoid(s);
        for (int64_t i = 0; i < H; i++) y[t * H + i] *= gs;
    }

    for (int64_t t = 0; t < T; t++) {
        const float *xt = x + t * H;
        ts_cpu_matmul(L->ffn_gate_inp, 0, E, xt, 1, w->router);
        float mx = -INFINITY, sum = 0;
        for (int64_t e = 0; e < E; e++) mx = fmaxf(mx, w->router[e]);
        for (int64_t e = 0; e < E; e++) sum += (w->router[e] = expf(w->router[e] - mx));
        for (int64_t e = 0; e < E; e++) w->router[e] /= sum;
        top_k(w->router, E, k, idx);
        float wsum = 0;
        for (int64_t s = 0; s < k; s++) wsum += w->router[idx[s]];
        for (int64_t s = 0; s < k; s++) {
            swiglu(w, gate, L->ffn_up_exps, L->ffn_down_exps, idx[s], F, xt, 1, w->eo);
            const float we = w->router[idx[s]] / wsum;
            for (int64_t i = 0; i < H; i++) y[t * H + i] += we * w->eo[i];
        }
    }
}
