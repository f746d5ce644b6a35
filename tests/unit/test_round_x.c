/* Tests for the host reference of the CUDA tensor-core GEMV's rounding of x (ts_round_x_like_tc,
 * src/quant/round_x.c) and for the CPU backend's emulation of it, TURBOSPARK_CPU_ROUND_X=1
 * (src/cpu/ops.c). This executable turns the switch on for itself before the first product.
 *
 * (a) The rule on hand-made groups: a zero group stays zero; values keep 11 significant bits, ties to
 *     even; the power of two puts the group's max in [2^14, 2^15), so an element 2^-16 of the max
 *     survives as an fp16 subnormal and one 2^-26 of it becomes 0; the exponent clamps (an fp32
 *     subnormal max, a max near FLT_MAX); groups are independent; in place works.
 * (b) On random groups over twelve decades: each output is within 2^-11 relative of its input (or
 *     below fp16's subnormal step of the group's scale), and a second rounding changes nothing.
 * (c) The emulation: for Q4_K, Q5_K, Q6_K (groups of 256), Q8_0, Q5_0 (128), ts_cpu_matmul and
 *     ts_cpu_matmul_each with the switch on equal, bit for bit, the _unrounded products of
 *     ts_round_x_like_tc(x), at T = 1, 3, 8 and on products large enough for the thread pool, and they
 *     differ from the products of x itself; for the other types (F32, F16, Q4_0, Q5_1, IQ4_NL) and for
 *     rows that are not a whole number of groups (Q8_0 of 96 or 160 inputs, Q5_0 of 640 is whole), and
 *     for the _unrounded products always, the switch changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"
#include "cpu/cpu.h"
#include "quant/quant.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static double uniform01(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return ((g_rng >> 11) + 0.5) / 9007199254740992.0;
}

static float gaussian(void) {
    return (float)(sqrt(-2 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}

/* ---- (a) the rule on hand-made groups ----------------------------------------------------------- */

static void test_rule_by_hand(void **state) {
    (void)state;
    enum { G = 128 };
    float x[2 * G], y[2 * G];
    assert_int_equal(ts_tc_x_group(TS_TYPE_Q4_K), 256);
    assert_int_equal(ts_tc_x_group(TS_TYPE_Q5_K), 256);
    assert_int_equal(ts_tc_x_group(TS_TYPE_Q6_K), 256);
    assert_int_equal(ts_tc_x_group(TS_TYPE_Q8_0), 128);
    assert_int_equal(ts_tc_x_group(TS_TYPE_Q5_0), 128);
    assert_int_equal(ts_tc_x_group(TS_TYPE_Q4_0), 0);
    assert_int_equal(ts_tc_x_group(TS_TYPE_F32), 0);
    assert_int_equal(ts_tc_x_group(TS_TYPE_IQ4_NL), 0);

    /* group 0: max 1; group 1 all zero */
    memset(x, 0, sizeof x);
    x[0] = 1.0f;
    x[1] = 1.0f + 0x1p-11f;     /* half-way between 1 and 1 + 2^-10: ties to even, 1 */
    x[2] = 1.0f + 3 * 0x1p-11f; /* half-way between 1 + 2^-10 and 1 + 2^-9: to 1 + 2^-9 */
    x[3] = -(1.0f + 0x1p-10f);  /* representable */
    x[4] = 0x1p-16f;            /* ·2^14 = 2^-2: exact */
    x[5] = 0x1p-30f;            /* ·2^14 = 2^-16: an fp16 subnormal (step 2^-24), exact */
    x[6] = 0x1p-30f * 1.2f;     /* 2^-16·1.2: the subnormal step 2^-24 leaves 2^-16 + 51·2^-24 */
    x[7] = 0x1p-39f;            /* ·2^14 = 2^-25: half the smallest subnormal, ties to even: 0 */
    x[8] = 0x1p-40f;            /* 2^-26 after scaling: 0 */
    x[9] = 0.999f;              /* 0.999 = 2046.xx·2^-11: nearest 2046·2^-11 */
    ts_round_x_like_tc(x, 2 * G, G, y);
    assert_true(y[0] == 1.0f);
    assert_true(y[1] == 1.0f);
    assert_true(y[2] == 1.0f + 0x1p-9f);
    assert_true(y[3] == -(1.0f + 0x1p-10f));
    assert_true(y[4] == 0x1p-16f);
    assert_true(y[5] == 0x1p-30f);
    assert_true(y[6] == 0x1p-30f + 51 * 0x1p-38f); /* 1.2·2^-16 = 2^-16 + 0.2·2^8·2^-24, 0.2·256 = 51.2 */
    assert_true(y[7] == 0.0f);
    assert_true(y[8] == 0.0f);
    assert_true(y[9] == 2046 * 0x1p-11f);
    for (int i = 10; i < 2 * G; i++) assert_true(y[i] == 0.0f);

    /* the same values under a max 2^20 times larger: the small ones fall below fp16's range */
    memcpy(y, x, sizeof x);
    y[G - 1] = 0x1p20f;             /* the group's max now 2^20: scale 2^-6 */
    ts_round_x_like_tc(y, G, G, y); /* in place */
    assert_true(y[G - 1] == 0x1p20f);
    assert_true(y[0] == 1.0f);           /* 2^-6 scaled: a normal fp16 */
    assert_true(y[4] == 0x1p-16f);       /* 2^-22 scaled: subnormal, exact */
    assert_true(y[5] == 0.0f);           /* 2^-36 scaled: 0 */
    assert_true(y[2] == 1.0f + 0x1p-9f); /* still 11 bits */

    /* clamps: an fp32 subnormal max (its exponent field 0 → s = 126) and a max of exponent 127 (s = −113) */
    memset(x, 0, sizeof x);
    x[0] = 0x1p-130f, x[1] = 0x1p-140f * 3.0f;
    x[G] = 0x1p127f * 1.5f, x[G + 1] = -0x1p120f * 1.5f, x[G + 2] = 0x1p100f, x[G + 3] = 0x1p85f;
    ts_round_x_like_tc(x, 2 * G, G, y);
    assert_true(y[0] == 0x1p-130f);        /* ·2^126 = 2^-4 */
    assert_true(y[1] == 0x1p-140f * 3.0f); /* 3·2^-14 */
    assert_true(y[G] == 0x1p127f * 1.5f);  /* ·2^-113 = 1.5·2^14 */
    assert_true(y[G + 1] == -0x1p120f * 1.5f);
    assert_true(y[G + 2] == 0x1p100f); /* 2^-13: a normal fp16 */
    assert_true(y[G + 3] == 0.0f);     /* 2^-28: below half the smallest subnormal */
}

/* ---- (b) random groups --------------------------------------------------------------------------- */

static void test_rule_random(void **state) {
    (void)state;
    enum { G = 256, NG = 400 };
    float *x = malloc(G * NG * sizeof *x), *y = malloc(G * NG * sizeof *y), *z = malloc(G * NG * sizeof *z);
    assert_non_null(x), assert_non_null(y), assert_non_null(z);
    for (int g = 0; g < NG; g++) {
        const double mag = pow(10.0, -6.0 + 12.0 * uniform01()); /* twelve decades */
        for (int i = 0; i < G; i++) x[g * G + i] = (float)(mag * gaussian());
    }
    ts_round_x_like_tc(x, G * NG, G, y);
    int changed = 0;
    for (int g = 0; g < NG; g++) {
        float amax = 0;
        for (int i = 0; i < G; i++) amax = fmaxf(amax, fabsf(x[g * G + i]));
        int e;
        frexpf(amax, &e);                          /* amax in [2^(e−1), 2^e) */
        const double sub = ldexp(1.0, e - 1 - 38); /* fp16's subnormal step 2^-24 at the scale 2^(15−e) */
        for (int i = 0; i < G; i++) {
            const double a = x[g * G + i], b = y[g * G + i];
            if (fabs(a) >= ldexp(1.0, e - 1 - 28)) /* a normal fp16 after scaling */
                assert_true(fabs(b - a) <= ldexp(fabs(a), -11));
            else
                assert_true(fabs(b - a) <= sub / 2);
            changed += a != b;
        }
    }
    assert_true(changed > G * NG / 2); /* most values lose bits */
    ts_round_x_like_tc(y, G * NG, G, z);
    assert_memory_equal(y, z, G * NG * sizeof *y); /* idempotent */
    free(x), free(y), free(z);
}

/* ---- (c) the emulation in ts_cpu_matmul ------------------------------------------------------------ */

typedef struct {
    ts_gguf_tensor W;
    uint8_t *data;
} matrix;

static void make_matrix(matrix *m, uint32_t type, int64_t ne0, int64_t rows) {
    const size_t rb = ts_row_size(type, ne0);
    assert_true(rb > 0);
    m->data = malloc(rb * (size_t)rows);
    float *src = malloc((size_t)ne0 * sizeof *src);
    assert_non_null(m->data), assert_non_null(src);
    char err[256];
    for (int64_t r = 0; r < rows; r++) {
        const double sc = 0.05 + uniform01(), off = r % 3 == 0 ? sc : 0.0;
        for (int64_t i = 0; i < ne0; i++) src[i] = (float)(sc * gaussian() + off);
        assert_int_equal(ts_quantize_row(type, src, m->data + (size_t)r * rb, ne0, err, sizeof err), 0);
    }
    free(src);
    memset(&m->W, 0, sizeof m->W);
    m->W.n_dims = 2, m->W.ne[0] = ne0, m->W.ne[1] = rows, m->W.ne[2] = m->W.ne[3] = 1;
    m->W.type = type, m->W.nbytes = rb * (uint64_t)rows, m->W.nelements = ne0 * rows, m->W.data = m->data;
}

/* x: T tokens, each group of 32 inputs at its own magnitude (so groups of 128 and 256 differ in scale) */
static void random_x(float *x, int64_t T, int64_t ne0) {
    for (int64_t b = 0; b < T * ne0; b += 32) {
        const double mag = pow(10.0, -3.0 + 6.0 * uniform01());
        for (int i = 0; i < 32 && b + i < T * ne0; i++) x[b + i] = (float)(mag * gaussian());
    }
}

/* One type and width: returns whether the switch changed the product. */
static bool check_product(uint32_t type, int64_t ne0, int64_t rows, int64_t row0, int64_t n_out, int64_t T) {
    matrix m;
    make_matrix(&m, type, ne0, rows);
    float *x = malloc((size_t)(T * ne0) * sizeof *x), *xr = malloc((size_t)(T * ne0) * sizeof *xr);
    float *y = malloc((size_t)(T * n_out) * sizeof *y), *yr = malloc((size_t)(T * n_out) * sizeof *yr);
    float *yx = malloc((size_t)(T * n_out) * sizeof *yx);
    assert_non_null(x), assert_non_null(xr), assert_non_null(y), assert_non_null(yr), assert_non_null(yx);
    random_x(x, T, ne0);
    const int64_t G = ts_tc_x_group(type);
    const bool rounds = G > 0 && ne0 % G == 0;
    if (rounds)
        ts_round_x_like_tc(x, T * ne0, G, xr);
    else
        memcpy(xr, x, (size_t)(T * ne0) * sizeof *xr);
    const size_t yb = (size_t)(T * n_out) * sizeof *y;

    ts_cpu_matmul(&m.W, row0, n_out, x, T, y);             /* the switch is on */
    ts_cpu_matmul_unrounded(&m.W, row0, n_out, xr, T, yr); /* the reference's rounding, by hand */
    ts_cpu_matmul_unrounded(&m.W, row0, n_out, x, T, yx);  /* x itself */
    if (memcmp(y, yr, yb) != 0)
        fail_msg("%s ne0 %lld T %lld: ts_cpu_matmul", ts_type_name(type), (long long)ne0, (long long)T);
    const bool changed = memcmp(y, yx, yb) != 0;
    if (changed != rounds)
        fail_msg("%s ne0 %lld T %lld: the switch %s the product", ts_type_name(type), (long long)ne0,
                 (long long)T, changed ? "changed" : "did not change");

    ts_cpu_matmul_each(&m.W, row0, n_out, x, T, y);
    ts_cpu_matmul_each_unrounded(&m.W, row0, n_out, xr, T, yr);
    if (memcmp(y, yr, yb) != 0)
        fail_msg("%s ne0 %lld T %lld: ts_cpu_matmul_each", ts_type_name(type), (long long)ne0, (long long)T);

    /* the x the caller passed is left alone */
    float *x2 = malloc((size_t)(T * ne0) * sizeof *x2);
    assert_non_null(x2);
    memcpy(x2, x, (size_t)(T * ne0) * sizeof *x2);
    ts_cpu_matmul(&m.W, row0, n_out, x, T, y);
    assert_memory_equal(x, x2, (size_t)(T * ne0) * sizeof *x2);
    free(x2), free(x), free(xr), free(y), free(yr), free(yx), free(m.data);
    return changed;
}

static void test_emulation(void **state) {
    (void)state;
    assert_true(ts_cpu_round_x_enabled());
    static const uint32_t rounding[] = {TS_TYPE_Q4_K, TS_TYPE_Q5_K, TS_TYPE_Q6_K, TS_TYPE_Q8_0, TS_TYPE_Q5_0};
    static const int64_t Ts[] = {1, 3, 8};
    for (size_t i = 0; i < sizeof rounding / sizeof *rounding; i++) {
        for (size_t t = 0; t < sizeof Ts / sizeof *Ts; t++) {
            assert_true(check_product(rounding[i], 512, 24, 8, 16, Ts[t]));
            assert_true(check_product(rounding[i], 2560, 8, 0, 8, Ts[t]));
        }
        assert_true(check_product(rounding[i], 1024, 512, 0, 512, 5)); /* the thread pool's size */
    }
    /* rows that are not a whole number of groups: not rounded (on CUDA these take the SIMT kernel) */
    assert_false(check_product(TS_TYPE_Q8_0, 96, 8, 0, 8, 3));
    assert_false(check_product(TS_TYPE_Q8_0, 160, 8, 0, 8, 3));
    assert_false(check_product(TS_TYPE_Q5_0, 320, 8, 0, 8, 3));
    assert_true(check_product(TS_TYPE_Q5_0, 640, 8, 0, 8, 3));
    /* types the tensor-core kernel does not read */
    static const uint32_t plain[] = {TS_TYPE_F32, TS_TYPE_F16, TS_TYPE_Q4_0, TS_TYPE_Q5_1, TS_TYPE_IQ4_NL};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
        assert_false(check_product(plain[i], 512, 8, 0, 8, 3));
}

int main(void) {
    setenv("TURBOSPARK_CPU_ROUND_X", "1", 1); /* read once, at the first product */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_by_hand),
        cmocka_unit_test(test_rule_random),
        cmocka_unit_test(test_emulation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
