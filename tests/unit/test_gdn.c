/* GDN: the chunked (WY/UT) form against the token recurrence on random heads (docs/MODEL.md §5.5, §7): the same
 * outputs and final state to fp32 rounding, for sequences shorter than a chunk, exactly one chunk,
 * one row past it and several chunks, at small and at the released head sizes (dk = dv = 128), with
 * decays from ~1 (g ≈ −1e−4) down to e^−6 and a non-zero incoming state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cpu/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 12345;
static float uniform(void) { /* [0, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(rng >> 40) / (float)(1u << 24);
}

static void normalise(float *x, int64_t n, float scale) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    for (int64_t i = 0; i < n; i++) x[i] *= scale / sqrtf(s + 1e-6f);
}

static double max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* One head of T rows laid out as the forward lays them (q | k | v per row, β and g per row). */
static void compare(int64_t T, int64_t dk, int64_t dv, double *e_o, double *e_s) {
    const int64_t rs = 2 * dk + dv;
    float *u = malloc((size_t)(T * rs) * sizeof(float)), *beta = malloc((size_t)T * sizeof(float));
    float *lg = malloc((size_t)T * sizeof(float)), *o1 = malloc((size_t)(T * dv) * sizeof(float));
    float *o2 = malloc((size_t)(T * dv) * sizeof(float)), *S1 = malloc((size_t)(dk * dv) * sizeof(float));
    float *S2 = malloc((size_t)(dk * dv) * sizeof(float));
    float *scratch = malloc((size_t)ts_cpu_gdn_chunk_scratch(dv) * sizeof(float));
    assert_non_null(u), assert_non_null(beta), assert_non_null(lg), assert_non_null(o1), assert_non_null(o2);
    assert_non_null(S1), assert_non_null(S2), assert_non_null(scratch);
    for (int64_t t = 0; t < T; t++) {
        float *r = u + t * rs;
        for (int64_t i = 0; i < rs; i++) r[i] = 2 * uniform() - 1;
        normalise(r, dk, 1.0f / sqrtf((float)dk));
        normalise(r + dk, dk, 1.0f);
        beta[t] = uniform();
        lg[t] = t % 5 == 0 ? -1e-4f * uniform() : -6.0f * uniform() * uniform();
    }
    for (int64_t i = 0; i < dk * dv; i++) S1[i] = S2[i] = uniform() - 0.5f;
    const ts_gdn_head h1 = {.T = T,
                            .dk = dk,
                            .dv = dv,
                            .q = u,
                            .k = u + dk,
                            .qs = rs,
                            .v = u + 2 * dk,
                            .vs = rs,
                            .beta = beta,
                            .lg = lg,
                            .gs = 1,
                            .o = o1,
                            .os = dv};
    ts_gdn_head h2 = h1;
    h2.o = o2;
    ts_cpu_gdn_recur(&h1, S1, scratch);
    ts_cpu_gdn_chunked(&h2, S2, scratch);
    *e_o = max_diff(o1, o2, T * dv) / max_abs(o1, T * dv);
    *e_s = max_diff(S1, S2, dk * dv) / max_abs(S1, dk * dv);
    free(u), free(beta), free(lg), free(o1), free(o2), free(S1), free(S2), free(scratch);
}

static void test_chunked_equals_recurrence(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{16, 24}, {128, 128}};
    const int64_t lengths[] = {1, 7, TS_GDN_CHUNK, TS_GDN_CHUNK + 1, 3 * TS_GDN_CHUNK + 13};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            double e_o, e_s;
            compare(lengths[l], shapes[s][0], shapes[s][1], &e_o, &e_s);
            printf("dk %3lld dv %3lld T %3lld: outputs %.2e, state %.2e of max|.|\n", (long long)shapes[s][0],
                   (long long)shapes[s][1], (long long)lengths[l], e_o, e_s);
            assert_true(e_o <= 2e-5);
            assert_true(e_s <= 2e-5);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_chunked_equals_recurrence)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
