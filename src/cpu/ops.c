/* Generic CPU ops: quantized matrix products, row gathers, RMS norm, RoPE. */
#include "cpu/cpu.h"

#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ts_cpu_get_row(const ts_gguf_tensor *t, int64_t r, float *out) {
    size_t rb = ts_row_size(t->type, t->ne[0]);
    ts_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, out, t->ne[0], NULL, 0);
}

const float *ts_cpu_f32(const ts_gguf_tensor *t, float *scratch) {
    if (t->type == 0 /* F32 */) return (const float *)t->data; /* GGUF data is ≥ 32-byte aligned */
    int64_t rows = t->nelements / t->ne[0];
    for (int64_t r = 0; r < rows; r++) ts_cpu_get_row(t, r, scratch + r * t->ne[0]);
    return scratch;
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Each weight row is dequantized once and used for all T inputs; rows are split across threads. */
void ts_cpu_matmul(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T, float *y) {
    const int64_t n_in = W->ne[0];
    const size_t rb = ts_row_size(W->type, n_in);
    const uint8_t *base = (const uint8_t *)W->data + (size_t)row0 * rb;
    const bool is_f32 = W->type == TS_TYPE_F32;
#pragma omp parallel if (n_out * n_in * T > 32768)
    {
        float *row = is_f32 ? NULL : malloc((size_t)n_in * sizeof *row);
#pragma omp for schedule(static)
        for (int64_t o = 0; o < n_out; o++) {
            const float *w = (const float *)(base + (size_t)o * rb);
            if (!is_f32) {
                ts_dequantize_row(W->type, base + (size_t)o * rb, row, n_in, NULL, 0);
                w = row;
            }
            for (int64_t t = 0; t < T; t++) y[t * n_out + o] = dot(w, x + t * n_in, n_in);
        }
        free(row);
    }
}

void ts_cpu_rmsnorm(const float *x, const float *g, int64_t n, int64_t group, float eps, float *y) {
    for (int64_t s = 0; s < n; s += group) {
        float ss = 0;
        for (int64_t i = 0; i < group; i++) ss += x[s + i] * x[s + i];
        float r = 1.0f / sqrtf(ss / (float)group + eps);
        for (int64_t i = 0; i < group; i++) y[s + i] = x[s + i] * r * (g ? g[s + i] : 1.0f);
    }
}

void ts_cpu_rope(float *x, int64_t n_rot, float theta, int64_t pos) {
    const int64_t half = n_rot / 2;
    for (int64_t d = 0; d < half; d++) {
        /* as the reference: inv_freq in fp32, angle = fp32(pos · inv_freq) */
        float inv = 1.0f / powf(theta, (float)(2 * d) / (float)n_rot);
        float ang = (float)pos * inv;
        float c = cosf(ang), s = sinf(ang);
        float a = x[d], b = x[d + half];
        x[d] = a * c - b * s;
        x[d + half] = b * c + a * s;
    }
}
