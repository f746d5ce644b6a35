/* Sampler: greedy and its tie rule, seed reproducibility, the support of top-k/top-p/min-p,
 * the empirical distribution at temperature 1, penalties, and refusals of bad parameters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/sampler.h"

#include <math.h>
#include <string.h>

static ts_sampler *make(ts_sampler_params p, int32_t V) {
    char err[256];
    ts_sampler *s;
    if (ts_sampler_new(&p, V, &s, err, sizeof err)) fail_msg("%s", err);
    return s;
}

static ts_sampler_params plain(float temp) {
    ts_sampler_params p = {
        .temperature = temp, .top_k = 0, .top_p = 1, .min_p = 0, .repeat_penalty = 1, .seed = 42};
    return p;
}

static void test_greedy_and_ties(void **state) {
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    ts_sampler *s = make(plain(0), 6);
    assert_int_equal(ts_sampler_sample(s, l), 1); /* tie between 1 and 3: the lower id */
    ts_sampler_free(s);
}

/* A mask keeps only its tokens: greedy takes the best allowed one, sampling (with top-k) never
 * leaves the mask, and an all-allowed mask draws exactly what the unmasked sampler draws. */
static void test_masked(void **state) {
    float l[70];
    for (int i = 0; i < 70; i++) l[i] = sinf((float)i * 0.7f) * 3;
    uint32_t allow[3] = {0}, all[3] = {~0u, ~0u, ~0u};
    const int ids[] = {5, 33, 34, 64, 69};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) allow[ids[i] >> 5] |= 1u << (ids[i] & 31);
    int best = ids[0];
    for (size_t i = 1; i < sizeof ids / sizeof *ids; i++)
        if (l[ids[i]] > l[best]) best = ids[i];
    ts_sampler *s = make(plain(0), 70);
    assert_int_equal(ts_sampler_sample_masked(s, l, allow), best);
    ts_sampler_free(s);
    ts_sampler_params p = plain(1.5f);
    p.top_k = 2;
    s = make(p, 70);
    int seen[70] = {0};
    for (int k = 0; k < 500; k++) seen[ts_sampler_sample_masked(s, l, allow)]++;
    for (int i = 0; i < 70; i++) assert_true(!seen[i] || ((allow[i >> 5] >> (i & 31)) & 1));
    int kinds = 0;
    for (int i = 0; i < 70; i++) kinds += seen[i] > 0;
    assert_int_equal(kinds, 2); /* top-k 2 among the allowed */
    ts_sampler_free(s);
    ts_sampler *a = make(plain(1), 70), *b = make(plain(1), 70);
    for (int k = 0; k < 100; k++)
        assert_int_equal(ts_sampler_sample_masked(a, l, all), ts_sampler_sample(b, l));
    ts_sampler_free(a), ts_sampler_free(b);
}

static void test_seed_reproducible(void **state) {
    float l[50];
    for (int i = 0; i < 50; i++) l[i] = sinf((float)i);
    ts_sampler *a = make(plain(1), 50), *b = make(plain(1), 50);
    ts_sampler_params p2 = plain(1);
    p2.seed = 43;
    ts_sampler *c = make(p2, 50);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = ts_sampler_sample(a, l), y = ts_sampler_sample(b, l), z = ts_sampler_sample(c, l);
        assert_int_equal(x, y);
        differ += x != z;
    }
    assert_true(differ > 50);
    ts_sampler_reset(a, 42);
    ts_sampler_reset(b, 42);
    for (int i = 0; i < 20; i++) assert_int_equal(ts_sampler_sample(a, l), ts_sampler_sample(b, l));
    ts_sampler_free(a), ts_sampler_free(b), ts_sampler_free(c);
}

/* Draws n times and counts per token. */
static void histogram(ts_sampler *s, const float *l, int32_t V, int n, int *h) {
    memset(h, 0, (size_t)V * sizeof *h);
    for (int i = 0; i < n; i++) h[ts_sampler_sample(s, l)]++;
}

static void test_distribution_matches_softmax(void **state) {
    float l[8] = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 0.2f};
    int h[8];
    ts_sampler *s = make(plain(1), 8);
    const int n = 200000;
    histogram(s, l, 8, n, h);
    double z = 0;
    for (int i = 0; i < 8; i++) z += exp(l[i]);
    for (int i = 0; i < 8; i++) {
        double p = exp(l[i]) / z, sd = sqrt(p * (1 - p) / n);
        assert_true(fabs((double)h[i] / n - p) < 5 * sd); /* within 5 sigma */
    }
    ts_sampler_free(s);
    /* temperature 0.5 sharpens: p ∝ exp(2·l) */
    s = make(plain(0.5f), 8);
    histogram(s, l, 8, n, h);
    z = 0;
    for (int i = 0; i < 8; i++) z += exp(2 * l[i]);
    for (int i = 0; i < 8; i++) {
        double p = exp(2 * l[i]) / z, sd = sqrt(p * (1 - p) / n) + 1e-9;
        assert_true(fabs((double)h[i] / n - p) < 5 * sd + 1e-5);
    }
    ts_sampler_free(s);
}

static void test_truncation_support(void **state) {
    enum { V = 1000 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = -0.01f * (float)((i * 7919) % V); /* a permutation of levels */
    int h[V];
    /* top_k = 5: only the 5 best ids ever appear */
    ts_sampler_params p = plain(1);
    p.top_k = 5;
    ts_sampler *s = make(p, V);
    histogram(s, l, V, 20000, h);
    int seen = 0;
    for (int i = 0; i < V; i++)
        if (h[i]) {
            seen++;
            assert_true(l[i] >= -0.04f - 1e-6f); /* the five levels 0 … −0.04 */
        }
    assert_int_equal(seen, 5);
    ts_sampler_free(s);
    /* top_k = 1 is greedy */
    p.top_k = 1;
    s = make(p, V);
    for (int i = 0; i < 100; i++) assert_int_equal(ts_sampler_sample(s, l), 0);
    ts_sampler_free(s);
    /* top_p: probabilities 0.5, 0.25, 0.125, ...: top_p 0.7 keeps exactly the first two */
    float g[6];
    for (int i = 0; i < 6; i++) g[i] = -(float)i * logf(2.0f);
    p = plain(1);
    p.top_p = 0.7f;
    s = make(p, 6);
    int hg[6];
    histogram(s, g, 6, 20000, hg);
    assert_true(hg[0] > 0 && hg[1] > 0);
    for (int i = 2; i < 6; i++) assert_int_equal(hg[i], 0);
    assert_true(fabs(hg[0] / 20000.0 - 2.0 / 3.0) < 0.02); /* renormalised 0.5/0.75 */
    ts_sampler_free(s);
    /* min_p 0.2: keeps p ≥ 0.2·0.5 = 0.1 → the first three */
    p = plain(1);
    p.min_p = 0.2f;
    s = make(p, 6);
    histogram(s, g, 6, 20000, hg);
    assert_true(hg[2] > 0);
    for (int i = 3; i < 6; i++) assert_int_equal(hg[i], 0);
    ts_sampler_free(s);
}

static void test_penalties(void **state) {
    float l[4] = {3.0f, 2.9f, 1.0f, -2.0f};
    ts_sampler_params p = plain(0);
    p.repeat_penalty = 1.5f;
    p.penalty_last_n = 8;
    ts_sampler *s = make(p, 4);
    assert_int_equal(ts_sampler_sample(s, l), 0);
    ts_sampler_accept(s, 0); /* 3.0 / 1.5 = 2.0 < 2.9 */
    assert_int_equal(ts_sampler_sample(s, l), 1);
    ts_sampler_free(s);
    /* frequency penalty grows with the count; presence once */
    p = plain(0);
    p.frequency_penalty = 0.06f;
    p.penalty_last_n = -1;
    s = make(p, 4);
    ts_sampler_accept(s, 0);
    assert_int_equal(ts_sampler_sample(s, l), 0); /* 3.0 − 0.06 > 2.9 */
    ts_sampler_accept(s, 0);
    assert_int_equal(ts_sampler_sample(s, l), 1); /* 3.0 − 0.12 < 2.9 */
    ts_sampler_free(s);
    p = plain(0);
    p.presence_penalty = 0.2f;
    p.penalty_last_n = -1;
    s = make(p, 4);
    ts_sampler_accept(s, 1);
    ts_sampler_accept(s, 1);
    ts_sampler_accept(s, 0);
    assert_int_equal(ts_sampler_sample(s, l), 0); /* both penalised by 0.2 once: 2.8 > 2.7 */
    ts_sampler_free(s);
    /* the logits passed in are not modified */
    assert_true(l[0] == 3.0f && l[1] == 2.9f);
}

/* ts_logprobs against a long double log-softmax, its top-k order (lowest id on ties) and its edges. */
static void test_logprobs(void **state) {
    enum { V = 5000 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = sinf((float)i * 0.37f) * 9 + (float)(i % 7);
    l[1234] = l[4321] = 20.0f; /* a tie for the best */
    long double m = l[0], sum = 0;
    for (int i = 1; i < V; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) sum += expl((long double)l[i] - m);
    const long double lse = m + logl(sum);
    int32_t ids[TS_LOGPROBS_MAX_TOP];
    float lp[TS_LOGPROBS_MAX_TOP];
    const float got = ts_logprobs(l, V, 77, 3, ids, lp);
    assert_true(fabsl((long double)got - ((long double)l[77] - lse)) < 1e-5);
    assert_int_equal(ids[0], 1234);
    assert_int_equal(ids[1], 4321);
    for (int i = 0; i < V; i++)
        if (i != 1234 && i != 4321) assert_true(l[i] <= l[ids[2]]);
    for (int k = 0; k < 3; k++)
        assert_true(fabsl((long double)lp[k] - ((long double)l[ids[k]] - lse)) < 1e-5);
    /* k past the limit is clamped; a chosen id outside the vocabulary has no probability */
    int32_t many[TS_LOGPROBS_MAX_TOP];
    float mlp[TS_LOGPROBS_MAX_TOP];
    assert_true(isinf(ts_logprobs(l, V, V, TS_LOGPROBS_MAX_TOP + 5, many, mlp)));
    for (int k = 1; k < TS_LOGPROBS_MAX_TOP; k++) assert_true(mlp[k] <= mlp[k - 1]);
    /* k = 0: only the chosen token's */
    assert_true(fabsl((long double)ts_logprobs(l, V, 1234, 0, ids, lp) - (20.0L - lse)) < 1e-5);
    (void)state;
}

static void test_refusals(void **state) {
    char err[256];
    ts_sampler *s;
    ts_sampler_params p = plain(1);
    p.top_p = 1.5f;
    assert_int_equal(ts_sampler_new(&p, 10, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "top_p"));
    p = plain(-1);
    assert_int_equal(ts_sampler_new(&p, 10, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "temperature"));
    p = plain(NAN);
    assert_int_equal(ts_sampler_new(&p, 10, &s, err, sizeof err), -1);
    p = plain(1);
    p.repeat_penalty = 0;
    assert_int_equal(ts_sampler_new(&p, 10, &s, err, sizeof err), -1);
    p.repeat_penalty = 1e-30f; /* positive, but it would turn logits into infinities */
    assert_int_equal(ts_sampler_check(&p, err, sizeof err), -1);
    assert_non_null(strstr(err, "repeat_penalty"));
    p = plain(1);
    p.top_k = -2;
    assert_int_equal(ts_sampler_new(&p, 10, &s, err, sizeof err), -1);
    p = plain(1);
    assert_int_equal(ts_sampler_new(&p, 0, &s, err, sizeof err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_and_ties),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_distribution_matches_softmax),
        cmocka_unit_test(test_truncation_support),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_masked),
        cmocka_unit_test(test_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
