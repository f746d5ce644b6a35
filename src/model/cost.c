/* What a decode step must move per token: the floor every benchmark is reported against
 * (docs/BENCHMARKS.md, "Method"). */
#include "model/qwen4exp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint64_t bytes_of(const ts_gguf_tensor *t) {
    return t ? t->nbytes : 0;
}

/* Expert tensors are read only for the routed experts: k of E for one token; for a batch of b
 * tokens routed independently, the expected union E·(1 − (1 − k/E)^b). */
static uint64_t expert_bytes(const ts_gguf_tensor *t, const ts_hparams *hp, int64_t batch) {
    if (!t) return 0;
    const double used =
        hp->n_expert * (1.0 - pow(1.0 - (double)hp->n_expert_used / hp->n_expert, (double)batch));
    return (uint64_t)((double)(t->nbytes / hp->n_expert) * used);
}

ts_decode_cost ts_model_decode_cost(const ts_model *m, int64_t ctx, int kv_value_bytes) {
    return ts_model_decode_cost_batch(m, ctx, kv_value_bytes, 1);
}

ts_decode_cost ts_model_decode_cost_batch(const ts_model *m, int64_t ctx, int kv_value_bytes, int64_t batch) {
    const ts_hparams *hp = &m->hp;
    ts_decode_cost c;
    memset(&c, 0, sizeof c);
    const ts_gguf *g = m->gguf;
    for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++) c.weight_bytes += ts_gguf_tensor_at(g, i)->nbytes;
    /* take out what is not read whole: tables read by row, experts read k of E */
    c.weight_bytes -= bytes_of(m->token_embd) - batch * (bytes_of(m->token_embd) / hp->n_vocab);
    if (m->output == m->token_embd)
        c.weight_bytes += bytes_of(m->output) - batch * (bytes_of(m->output) / hp->n_vocab);
    uint64_t ple_rows = 0;
    if (m->ple_table) ple_rows += bytes_of(m->ple_table);
    for (uint32_t h = 0; m->ple_head_tables && h < hp->ple_nh; h++)
        ple_rows += bytes_of(m->ple_head_tables[h]);
    if (hp->ple_layer >= 0) {
        const ts_gguf_tensor *t = m->ple_table ? m->ple_table : m->ple_head_tables[0];
        c.weight_bytes -= ple_rows;
        c.weight_bytes += (uint64_t)batch * hp->ple_nh * (t->nbytes / (uint64_t)t->ne[1]);
    }
    const int64_t attended =
        ctx < (int64_t)hp->idx_top_k + hp->compress - 1 ? ctx : (int64_t)hp->idx_top_k + hp->compress - 1;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const ts_layer_weights *L = &m->layers[l];
        const ts_gguf_tensor *ex[] = {L->ffn_gate_exps, L->ffn_up_exps, L->ffn_gate_up_exps,
                                      L->ffn_down_exps};
        for (int k = 0; k < 4; k++) c.weight_bytes -= bytes_of(ex[k]) - expert_bytes(ex[k], hp, batch);
        if (L->kind == TS_LAYER_GDN) {
            c.state_bytes +=
                (uint64_t)batch * (2ull * ts_gdn_state_floats(hp) * 4 + 2ull * ts_gdn_conv_floats(hp) * 4);
        } else {
            /* K and V of the attended tokens, plus one pooled indexer key (fp32) per complete block
             * scanned */
            c.kv_bytes += (uint64_t)batch * attended * 2 * hp->n_head_kv * hp->head_dim * kv_value_bytes;
            c.kv_bytes += (uint64_t)batch * (ctx / hp->compress) * hp->idx_head_dim * 4;
        }
    }
    for (uint32_t l = hp->n_layer; l < hp->n_block; l++) /* MTP blocks are not run by plain decode */
        for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++) {
            const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
            char pre[32];
            int n = snprintf(pre, sizeof pre, "blk.%u.", l);
            if (t->name.len > (uint64_t)n && memcmp(t->name.ptr, pre, (size_t)n) == 0)
                c.weight_bytes -= t->nbytes;
        }
    return c;
}
