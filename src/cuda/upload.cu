// Weight upload of the CUDA forward: upload.cuh says what and how. Matrices keep their file encoding
// (the rows of joined products placed back to back), vectors are fp32.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/upload.cuh"
#include "model/memplan.h"

#include <math.h>
#include <stdlib.h>

namespace ts_cu {

namespace {

const char *tname(const ts_gguf_tensor *t, char *buf, size_t n) {
    snprintf(buf, n, "%.*s", (int)(t->name.len > 120 ? 120 : t->name.len), t->name.ptr ? t->name.ptr : "");
    return buf;
}

// Fills rows × ne0 weights of `type` at device address d with random valid blocks: a pool of 61 random
// rows (a prime, so no power-of-two stride repeats), quantized on the host, tiled on the device.
// IQ1_S, IQ2_XXS and IQ2_XS, which ggml quantizes only with importance weights, get equal ones (as
// `synth` writes them).
void fill_random(uploader &u, uint8_t *d, uint32_t type, int64_t ne0, int64_t rows) {
    const size_t rb = ts_row_size(type, ne0), bytes = rb * (size_t)rows;
    const int64_t pool_rows = rows < 61 ? rows : 61;
    const bool weighted = ts_quantize_needs_imatrix(type);
    float *row = (float *)malloc((size_t)ne0 * sizeof(float));
    float *qw = weighted ? (float *)malloc((size_t)ne0 * sizeof(float)) : nullptr;
    uint8_t *pool = (uint8_t *)malloc(rb * (size_t)pool_rows);
    if (!row || !pool || (weighted && !qw)) {
        free(row), free(qw), free(pool);
        u.rc = ts_errf(u.err, u.errlen, "out of host memory preparing random weights");
        return;
    }
    for (int64_t i = 0; weighted && i < ne0; i++) qw[i] = 1.0f;
    const float scale = 1.0f / sqrtf((float)ne0);
    for (int64_t r = 0; r < pool_rows && !u.rc; r++) {
        for (int64_t i = 0; i < ne0; i++) row[i] = (2.0f * u.frand() - 1.0f) * 1.7f * scale;
        if (ts_quantize_row_imatrix(type, row, pool + rb * (size_t)r, ne0, qw, u.err, u.errlen)) u.rc = -1;
    }
    cudaError_t e = u.rc ? cudaSuccess : cudaMemcpy(d, pool, rb * (size_t)pool_rows, cudaMemcpyHostToDevice);
    free(row), free(qw), free(pool);
    if (e != cudaSuccess) u.rc = cuda_err(u.err, u.errlen, "uploading random weights", e);
    u.tile(d, rb * (size_t)pool_rows, bytes);
}

// A matrix in its file encoding (rows of ne0, higher dims folded into rows).
void up_mat(uploader &u, const ts_gguf_tensor *t, ts_cuda_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!t || u.rc) return;
    char nb[128];
    if (!ts_cuda_matmul_supports(t->type)) {
        u.rc = ts_errf(u.err, u.errlen,
                       "tensor '%s' has type %s, which the CUDA backend cannot read yet (supported: "
                       "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, "
                       "Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): requantize the "
                       "file",
                       tname(t, nb, sizeof nb), ts_type_name(t->type));
        return;
    }
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t rb = ts_row_size(t->type, t->ne[0]), bytes = rb * (size_t)rows;
    out->type = t->type, out->ne0 = t->ne[0], out->rows = rows, out->row_bytes = rb;
    uint8_t *d = (uint8_t *)u.take(ts_memplan_matrix_bytes(t));
    out->data = d;
    if (u.dry) return;
    if (!u.random) {
        u.copy(d, t->data, bytes);
        return;
    }
    fill_random(u, d, t->type, t->ne[0], rows);
}

// A 1-D or conv vector, dequantized to fp32 (random mode: uniform in [0.5, 1), negated for A).
void up_vec(uploader &u, const ts_gguf_tensor *t, const float **out, bool negative = false) {
    *out = nullptr;
    if (!t || u.rc) return;
    const size_t n = (size_t)t->nelements, bytes = n * sizeof(float);
    float *d = (float *)u.take(ts_memplan_vector_bytes(t));
    *out = d;
    if (u.dry) return;
    float *h = (float *)malloc(bytes);
    if (!h) {
        u.rc = ts_errf(u.err, u.errlen, "out of host memory");
        return;
    }
    if (u.random) {
        for (size_t i = 0; i < n; i++) h[i] = (negative ? -1.0f : 1.0f) * (0.5f + 0.5f * u.frand());
    } else {
        const size_t rb = ts_row_size(t->type, t->ne[0]);
        for (int64_t r = 0; r < t->nelements / t->ne[0] && !u.rc; r++)
            if (ts_dequantize_row(t->type, (const uint8_t *)t->data + rb * (size_t)r, h + r * t->ne[0],
                                  t->ne[0], u.err, u.errlen))
                u.rc = -1;
    }
    cudaError_t e = u.rc ? cudaSuccess : cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess) u.rc = cuda_err(u.err, u.errlen, "uploading a weight vector", e);
    u.tick(bytes);
}

// Matrices of one encoding uploaded back to back, so that one product computes all their rows:
// views[i] addresses tensor i's rows inside the region, *joined all of them. False, uploading
// nothing, when ts_memplan_joinable says no (a tensor is missing, their types or row lengths differ,
// or rows are not 16-byte multiples: the kernels need each view 16-byte aligned) or the products
// cannot read the type.
bool up_joined(uploader &u, const ts_gguf_tensor *const *t, int n, ts_cuda_tensor *const *views,
               ts_cuda_tensor *joined) {
    memset(joined, 0, sizeof *joined);
    if (!ts_memplan_joinable(t, n) || !ts_cuda_matmul_supports(t[0]->type)) return false;
    const size_t rb = ts_row_size(t[0]->type, t[0]->ne[0]);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += t[i]->ne[1];
    uint8_t *base = (uint8_t *)u.take(ts_memplan_joined_bytes(t, n));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        *views[i] =
            ts_cuda_tensor{t[0]->type, t[0]->ne[0], t[i]->ne[1], rb, base ? base + off : nullptr, nullptr};
        if (!u.dry && !u.random) u.copy(base + off, t[i]->data, rb * (size_t)t[i]->ne[1]);
        off += rb * (size_t)t[i]->ne[1];
    }
    *joined = ts_cuda_tensor{t[0]->type, t[0]->ne[0], total, rb, base, nullptr};
    if (!u.dry && u.random) fill_random(u, base, t[0]->type, t[0]->ne[0], total);
    return true;
}

void up_hc(uploader &u, const ts_hc_weights *h, ts_cuda_hc *o) {
    up_vec(u, h->norm, &o->norm);
    // down then inject rows back to back: one product computes both (hc.cu)
    const ts_gguf_tensor *di[2] = {h->down, h->inject};
    ts_cuda_tensor *dv[2] = {&o->down, &o->inject};
    if (!up_joined(u, di, 2, dv, &o->down_inject)) {
        up_mat(u, h->down, &o->down);
        up_mat(u, h->inject, &o->inject);
    }
    up_mat(u, h->up, &o->up);
}

void up_layer(uploader &u, const ts_layer_weights *L, ts_cuda_layer *o) {
    o->kind = L->kind;
    up_hc(u, &L->hc_attn, &o->hc_attn);
    up_hc(u, &L->hc_ffn, &o->hc_ffn);
    up_mat(u, L->attn_qkv, &o->attn_qkv), up_mat(u, L->ssm_out, &o->ssm_out);
    // z, β, α back to back: one product at batch 1 (gdn.cu)
    const ts_gguf_tensor *zba[3] = {L->attn_gate, L->ssm_beta, L->ssm_alpha};
    ts_cuda_tensor *zbv[3] = {&o->attn_gate, &o->ssm_beta, &o->ssm_alpha};
    if (!up_joined(u, zba, 3, zbv, &o->gate_beta_alpha))
        up_mat(u, L->attn_gate, &o->attn_gate), up_mat(u, L->ssm_beta, &o->ssm_beta),
            up_mat(u, L->ssm_alpha, &o->ssm_alpha);
    up_vec(u, L->ssm_a, &o->ssm_a, true), up_vec(u, L->ssm_dt, &o->ssm_dt);
    up_vec(u, L->ssm_conv1d, &o->ssm_conv1d), up_vec(u, L->ssm_norm, &o->ssm_norm);
    // q, k, v, idx_q, idx_k back to back (or the four but v, where v's encoding differs): one product at
    // batch 1 (qsa.cu); ts_memplan_qsa_in_bytes counts the same allocations
    const ts_gguf_tensor *in5[5] = {L->attn_q, L->attn_k, L->attn_v, L->idx_q, L->idx_k};
    ts_cuda_tensor *iv5[5] = {&o->attn_q, &o->attn_k, &o->attn_v, &o->idx_q, &o->idx_k};
    const ts_gguf_tensor *in4[4] = {L->attn_q, L->attn_k, L->idx_q, L->idx_k};
    ts_cuda_tensor *iv4[4] = {&o->attn_q, &o->attn_k, &o->idx_q, &o->idx_k};
    o->qsa_in_v = up_joined(u, in5, 5, iv5, &o->qsa_in);
    if (!o->qsa_in_v) {
        if (!up_joined(u, in4, 4, iv4, &o->qsa_in))
            up_mat(u, L->attn_q, &o->attn_q), up_mat(u, L->attn_k, &o->attn_k),
                up_mat(u, L->idx_q, &o->idx_q), up_mat(u, L->idx_k, &o->idx_k);
        up_mat(u, L->attn_v, &o->attn_v);
    }
    up_mat(u, L->attn_output, &o->attn_output);
    up_vec(u, L->attn_q_norm, &o->attn_q_norm), up_vec(u, L->attn_k_norm, &o->attn_k_norm);
    up_vec(u, L->idx_q_norm, &o->idx_q_norm), up_vec(u, L->idx_k_norm, &o->idx_k_norm);
    up_mat(u, L->ffn_gate_inp, &o->ffn_gate_inp);
    up_mat(u, L->ffn_gate_exps, &o->ffn_gate_exps), up_mat(u, L->ffn_up_exps, &o->ffn_up_exps);
    up_mat(u, L->ffn_gate_up_exps, &o->ffn_gate_up_exps), up_mat(u, L->ffn_down_exps, &o->ffn_down_exps);
    up_mat(u, L->ffn_gate_shexp, &o->ffn_gate_shexp), up_mat(u, L->ffn_up_shexp, &o->ffn_up_shexp);
    up_mat(u, L->ffn_down_shexp, &o->ffn_down_shexp),
        up_vec(u, L->ffn_gate_inp_shexp, &o->ffn_gate_inp_shexp);
    up_mat(u, L->ple_key, &o->ple_key), up_mat(u, L->ple_value, &o->ple_value);
    up_vec(u, L->ple_norm_key, &o->ple_norm_key), up_vec(u, L->ple_norm_query, &o->ple_norm_query);
    up_vec(u, L->ple_norm_conv, &o->ple_norm_conv), up_vec(u, L->ple_conv1d, &o->ple_conv1d);
}

} // namespace

// The trunk weights without the PLE table.
void up_trunk(uploader &u, const ts_model *m, ts_cuda_model *cm) {
    up_mat(u, m->token_embd, &cm->token_embd);
    if (m->output == m->token_embd)
        cm->output = cm->token_embd;
    else
        up_mat(u, m->output, &cm->output);
    up_hc(u, &m->output_hc, &cm->output_hc);
    for (uint32_t l = 0; l < m->hp.n_layer; l++) up_layer(u, &m->layers[l], &cm->layers[l]);
}

// The PLE table (joined, or one tensor per head) as gather-only tensors; the hash constants.
void up_table(uploader &u, const ts_model *m, ts_cuda_model *cm) {
    const ts_hparams *hp = &m->hp;
    if (hp->ple_layer < 0) return;
    if (m->ple_table)
        up_mat(u, m->ple_table, &cm->ple.joined);
    else
        for (uint32_t h = 0; h < hp->ple_nh; h++) up_mat(u, m->ple_head_tables[h], &cm->ple.heads[h]);
}

} // namespace ts_cu
