/* Quantization with importance weights (an imatrix): ts_quantize_row_imatrix.
 *
 * (a) ggml's own bytes: tests/fixtures/quant/imatrix_<type>.bin holds rows, one row of importance
 *     weights and what ggml_quantize_chunk wrote for them with those weights
 *     (tools/fixtures/make_imatrix_fixtures.py, run against ggml's libggml-base.so): every byte
 *     must be equal, for Q2_K .. Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
 *     IQ4_NL and IQ4_XS.
 * (b) The weights matter: with every other value weighted 100 times more, the squared error of
 *     those values falls by a tenth or more against the quantizer without weights (equal weights
 *     for IQ1_S, IQ2_XXS and IQ2_XS, which have none), and falls more than that of the others. (At 1000
 *     times, ggml's IQ2_XXS does worse on both halves: its start from make_qp_quants with 4 levels
 *     goes astray; we follow it.)
 * (c) Refusals, with a sentence: a type without a weighted quantizer, negative or NaN weights,
 *     NaN values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "test_files.h"

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static const char *k_types[] = {"q2_K",  "q3_K",    "q4_K",  "q5_K",   "q6_K",   "iq2_xxs", "iq2_xs",
                                "iq2_s", "iq3_xxs", "iq3_s", "iq4_nl", "iq4_xs", "iq1_s",   "iq1_m"};

static void test_equal_to_ggml(void **state) {
    (void)state;
    const char *dir = getenv("TS_FIXTURES");
    assert_non_null(dir);
    for (size_t t = 0; t < sizeof k_types / sizeof *k_types; t++) {
        char path[512];
        snprintf(path, sizeof path, "%s/quant/imatrix_%s.bin", dir, k_types[t]);
        size_t len;
        uint8_t *file = (uint8_t *)ts_test_slurp(path, &len);
        if (!file) fail_msg("cannot read %s (regenerate with tools/fixtures/make_imatrix_fixtures.py)", path);
        assert_true(len >= 20 && memcmp(file, "TSQW", 4) == 0 && rd32(file + 4) == 1);
        const uint32_t type = rd32(file + 8), rows = rd32(file + 12), n = rd32(file + 16);
        assert_int_equal(type, (uint32_t)ts_type_from_name(k_types[t]));
        const size_t row_bytes = ts_row_size(type, n);
        assert_int_equal(len, 20 + ((size_t)rows * n + n) * 4 + rows * row_bytes);
        float *x = malloc((size_t)rows * n * sizeof(float)), *qw = malloc(n * sizeof(float));
        uint8_t *got = malloc(row_bytes);
        assert_true(x && qw && got);
        memcpy(x, file + 20, (size_t)rows * n * 4);
        memcpy(qw, file + 20 + (size_t)rows * n * 4, (size_t)n * 4);
        const uint8_t *want = file + 20 + ((size_t)rows * n + n) * 4;
        char err[256];
        for (uint32_t r = 0; r < rows; r++) {
            if (ts_quantize_row_imatrix(type, x + (size_t)r * n, got, n, qw, err, sizeof err))
                fail_msg("%s: %s", k_types[t], err);
            if (memcmp(got, want + r * row_bytes, row_bytes) != 0)
                fail_msg("%s: row %u differs from ggml's bytes", k_types[t], r);
        }
        free(x), free(qw), free(got), free(file);
    }
}

static double weighted_error(uint32_t type, const float *x, const uint8_t *q, int lo, int hi) {
    float y[1024];
    char err[256];
    assert_int_equal(ts_dequantize_row(type, q, y, 1024, err, sizeof err), 0);
    double e = 0;
    for (int i = lo; i < hi; i++) e += (double)(y[i] - x[i]) * (y[i] - x[i]);
    return e;
}

static void test_weights_matter(void **state) {
    (void)state;
    float x[1024], qw[1024];
    uint64_t s = 12345;
    for (int i = 0; i < 1024; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
        qw[i] = i % 2 ? 100.0f : 1.0f; /* every other value matters */
    }
    for (size_t t = 0; t < sizeof k_types / sizeof *k_types; t++) {
        const uint32_t type = (uint32_t)ts_type_from_name(k_types[t]);
        uint8_t plain[1024], weighted[1024];
        char err[256];
        float ones[1024];
        for (int i = 0; i < 1024; i++) ones[i] = 1;
        if (ts_quantize_needs_imatrix(type)) /* no quantizer without weights: equal weights instead */
            assert_int_equal(ts_quantize_row_imatrix(type, x, plain, 1024, ones, err, sizeof err), 0);
        else
            assert_int_equal(ts_quantize_row(type, x, plain, 1024, err, sizeof err), 0);
        assert_int_equal(ts_quantize_row_imatrix(type, x, weighted, 1024, qw, err, sizeof err), 0);
        double hi_p = 0, hi_w = 0, lo_p = 0, lo_w = 0;
        for (int i = 0; i < 1024; i += 2) {
            hi_p += weighted_error(type, x, plain, i + 1, i + 2);
            hi_w += weighted_error(type, x, weighted, i + 1, i + 2);
            lo_p += weighted_error(type, x, plain, i, i + 1);
            lo_w += weighted_error(type, x, weighted, i, i + 1);
        }
        printf("%s: important half %.3g -> %.3g, other half %.3g -> %.3g\n", k_types[t], hi_p, hi_w, lo_p,
               lo_w);
        assert_true(hi_w < 0.9 * hi_p);
        assert_true(hi_w / hi_p < 0.8 * (lo_w / lo_p)); /* the important values gain more */
    }
}

static void test_refusals(void **state) {
    (void)state;
    float x[256] = {0}, qw[256];
    uint8_t q[512];
    char err[256] = "";
    for (int i = 0; i < 256; i++) qw[i] = 1;
    assert_int_equal(ts_quantize_row_imatrix(TS_TYPE_Q8_0, x, q, 256, qw, err, sizeof err), -1);
    assert_non_null(strstr(err, "importance weights"));
    assert_false(ts_can_quantize_imatrix(TS_TYPE_Q8_0));
    assert_true(ts_can_quantize_imatrix(TS_TYPE_Q4_K));
    qw[7] = -1;
    assert_int_equal(ts_quantize_row_imatrix(TS_TYPE_Q4_K, x, q, 256, qw, err, sizeof err), -1);
    assert_non_null(strstr(err, "weight 7 is -1"));
    qw[7] = NAN;
    assert_int_equal(ts_quantize_row_imatrix(TS_TYPE_Q4_K, x, q, 256, qw, err, sizeof err), -1);
    qw[7] = 1;
    x[3] = NAN;
    assert_int_equal(ts_quantize_row_imatrix(TS_TYPE_Q2_K, x, q, 256, qw, err, sizeof err), -1);
    assert_non_null(strstr(err, "element 3 of the row is NaN"));
    x[3] = 0;
    assert_int_equal(ts_quantize_row_imatrix(TS_TYPE_Q5_K, x, q, 200, qw, err, sizeof err), -1);
    assert_non_null(strstr(err, "multiple of the block"));
    assert_int_equal(ts_quantize_row_imatrix(TS_TYPE_Q8_0, x, q, 256, NULL, err, sizeof err),
                     0); /* no weights */
    /* IQ2_XXS / IQ2_XS / IQ1_S: no quantizer without weights; the sentence says how to make them. */
    static const uint32_t needs[] = {TS_TYPE_IQ2_XXS, TS_TYPE_IQ2_XS, TS_TYPE_IQ1_S};
    for (size_t i = 0; i < 3; i++) {
        const uint32_t t = needs[i];
        assert_true(ts_quantize_needs_imatrix(t) && ts_can_quantize_imatrix(t) && !ts_can_quantize(t));
        assert_int_equal(ts_quantize_row(t, x, q, 256, err, sizeof err), -1);
        assert_non_null(strstr(err, "without an importance matrix"));
        assert_non_null(strstr(err, "turbospark imatrix"));
        assert_int_equal(ts_quantize_row_imatrix(t, x, q, 256, NULL, err, sizeof err), -1);
    }
    assert_false(ts_quantize_needs_imatrix(TS_TYPE_IQ2_S));
    assert_false(ts_quantize_needs_imatrix(TS_TYPE_IQ1_M));
}

/* Weights that are all zero over a super-block: ggml (make_qp_quants' guard) stores d = dmin = 0
 * for Q2_K (seen with libggml-base.so), where a division 0/0 would give NaN. */
static void test_zero_weights(void **state) {
    (void)state;
    float x[256], qw[256] = {0};
    uint8_t q[84];
    char err[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 17) - 8.0f;
    assert_int_equal(ts_quantize_row_imatrix(TS_TYPE_Q2_K, x, q, 256, qw, err, sizeof err), 0);
    for (int i = 80; i < 84; i++) assert_int_equal(q[i], 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_to_ggml),
        cmocka_unit_test(test_weights_matter),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_zero_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
