/* Sampling (see sampler.h for the semantics). */
#include "engine/sampler.h"

#include "common/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TS_PENALTY_MAX_HISTORY 4096

typedef struct cand {
    int32_t id;
    float logit;
    float p;
} cand;

struct ts_sampler {
    ts_sampler_params p;
    int32_t n_vocab;
    cand *c;         /* [n_vocab] scratch */
    int32_t *hist;   /* ring of the last TS_PENALTY_MAX_HISTORY accepted tokens */
    int64_t n_hist;  /* tokens accepted so far */
    uint16_t *count; /* [n_vocab] scratch for penalty counts */
    uint64_t rng[4]; /* xoshiro256** */
};

ts_sampler_params ts_sampler_default_params(void) {
    return (ts_sampler_params){.temperature = 0.8f,
                               .top_k = 40,
                               .top_p = 0.95f,
                               .min_p = 0.05f,
                               .repeat_penalty = 1.0f,
                               .penalty_last_n = 64,
                               .seed = 0};
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return r;
}

static double next_uniform(uint64_t *s) {
    return (next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
} /* [0,1) */

void ts_sampler_reset(ts_sampler *s, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&x);
    s->n_hist = 0;
}

int ts_sampler_check(const ts_sampler_params *p, char *err, size_t errlen) {
    if (!(p->temperature >= 0) || p->temperature > 100)
        return ts_errf(err, errlen, "temperature must be between 0 and 100");
    if (!(p->top_p >= 0) || p->top_p > 1) return ts_errf(err, errlen, "top_p must be between 0 and 1");
    if (!(p->min_p >= 0) || p->min_p > 1) return ts_errf(err, errlen, "min_p must be between 0 and 1");
    if (p->top_k < 0) return ts_errf(err, errlen, "top_k must be 0 (off) or positive");
    /* a penalty divides logits: below 1e-6 a logit of 30 would pass 3e7 and soon overflow */
    if (!(p->repeat_penalty >= 1e-6f) || p->repeat_penalty > 100)
        return ts_errf(err, errlen, "repeat_penalty must be between 1e-6 and 100 (1 is off; got %g)",
                       (double)p->repeat_penalty);
    if (!(fabsf(p->presence_penalty) <= 2) || !(fabsf(p->frequency_penalty) <= 2))
        return ts_errf(err, errlen, "presence and frequency penalties must be between -2 and 2");
    if (p->penalty_last_n < -1 || p->penalty_last_n > TS_PENALTY_MAX_HISTORY)
        return ts_errf(err, errlen, "penalty_last_n must be -1 (all, up to %d) or 0 to %d",
                       TS_PENALTY_MAX_HISTORY, TS_PENALTY_MAX_HISTORY);
    return 0;
}

int ts_sampler_new(const ts_sampler_params *p, int32_t n_vocab, ts_sampler **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_vocab < 1) return ts_errf(err, errlen, "the vocabulary is empty");
    if (ts_sampler_check(p, err, errlen)) return -1;
    ts_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->c = malloc((size_t)n_vocab * sizeof *s->c);
        s->hist = malloc(TS_PENALTY_MAX_HISTORY * sizeof *s->hist);
        s->count = calloc((size_t)n_vocab, sizeof *s->count);
    }
    if (!s || !s->c || !s->hist || !s->count) {
        ts_sampler_free(s);
        return ts_errf(err, errlen, "out of memory for a sampler over %d tokens", n_vocab);
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    ts_sampler_reset(s, p->seed);
    *out = s;
    return 0;
}

int ts_sampler_configure(ts_sampler *s, const ts_sampler_params *p, char *err, size_t errlen) {
    if (ts_sampler_check(p, err, errlen)) return -1;
    s->p = *p;
    ts_sampler_reset(s, p->seed);
    return 0;
}

void ts_sampler_free(ts_sampler *s) {
    if (!s) return;
    free(s->c), free(s->hist), free(s->count), free(s);
}

void ts_sampler_accept(ts_sampler *s, int32_t token) {
    s->hist[s->n_hist % TS_PENALTY_MAX_HISTORY] = token;
    s->n_hist++;
}

/* Whether any penalty can change a logit now. */
static bool penalties_on(const ts_sampler *s) {
    const ts_sampler_params *p = &s->p;
    return p->penalty_last_n != 0 && s->n_hist > 0 &&
           (p->repeat_penalty != 1 || p->presence_penalty != 0 || p->frequency_penalty != 0);
}

static void apply_penalties(ts_sampler *s) {
    const ts_sampler_params *p = &s->p;
    if (!penalties_on(s)) return;
    int64_t n = p->penalty_last_n < 0 ? TS_PENALTY_MAX_HISTORY : p->penalty_last_n;
    if (n > s->n_hist) n = s->n_hist;
    if (n > TS_PENALTY_MAX_HISTORY) n = TS_PENALTY_MAX_HISTORY;
    for (int64_t i = 0; i < n; i++) {
        int32_t t = s->hist[(s->n_hist - 1 - i) % TS_PENALTY_MAX_HISTORY];
        if (t >= 0 && t < s->n_vocab && s->count[t] < UINT16_MAX) s->count[t]++;
    }
    for (int64_t i = 0; i < n; i++) {
        int32_t t = s->hist[(s->n_hist - 1 - i) % TS_PENALTY_MAX_HISTORY];
        if (t < 0 || t >= s->n_vocab || !s->count[t]) continue;
        float *l = &s->c[t].logit;
        if (p->repeat_penalty != 1) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
        s->count[t] = 0; /* each distinct token once; also clears the scratch */
    }
}

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Heap order for top-k: a parent is worse than (or equal to) its children. */
static void sift_down(cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && by_logit_desc(&h[l], &h[w]) > 0) w = l;
        if (r < n && by_logit_desc(&h[r], &h[w]) > 0) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w], h[w] = t;
        i = w;
    }
}

int32_t ts_sampler_sample(ts_sampler *s, const float *logits) {
    return ts_sampler_sample_masked(s, logits, NULL);
}

int32_t ts_sampler_sample_masked(ts_sampler *s, const float *logits, const uint32_t *allow) {
    const ts_sampler_params *p = &s->p;
    int32_t V = s->n_vocab;
    if (p->temperature <= 0 && !allow && !penalties_on(s)) { /* greedy on the logits as they are */
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    for (int32_t i = 0; i < V; i++) s->c[i] = (cand){i, logits[i], 0};
    apply_penalties(s);
    if (allow) { /* keep the allowed candidates only (ids stay in order) */
        int32_t k = 0;
        for (int32_t i = 0; i < V; i++)
            if ((allow[i >> 5] >> (i & 31)) & 1) s->c[k++] = s->c[i];
        if (k == 0) return 0; /* the caller guarantees one; never read past the list */
        V = k;
    }

    if (p->temperature <= 0) { /* greedy: lowest id wins ties */
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        return s->c[best].id;
    }
    /* top-k first: a min-heap of the k best (O(V log k)) keeps large vocabularies cheap */
    int32_t n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    if (n < V) {
        cand *h = s->c; /* h[0..n) is a heap whose root is the WORST kept candidate */
        for (int32_t i = n / 2 - 1; i >= 0; i--) sift_down(h, n, i);
        for (int32_t i = n; i < V; i++)
            if (by_logit_desc(&s->c[i], &h[0]) < 0) {
                h[0] = s->c[i];
                sift_down(h, n, 0);
            }
    }
    qsort(s->c, (size_t)n, sizeof *s->c, by_logit_desc);
    /* softmax with temperature over the kept candidates */
    const float mx = s->c[0].logit;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += (s->c[i].p = expf((s->c[i].logit - mx) / p->temperature));
    for (int32_t i = 0; i < n; i++) s->c[i].p = (float)(s->c[i].p / sum);
    if (p->top_p < 1) { /* smallest prefix whose mass reaches top_p (at least one token) */
        double cum = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += s->c[i].p;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0) { /* drop tokens below min_p × the most likely one */
        int32_t keep = 1;
        while (keep < n && s->c[keep].p >= p->min_p * s->c[0].p) keep++;
        n = keep;
    }
    double total = 0;
    for (int32_t i = 0; i < n; i++) total += s->c[i].p;
    double r = next_uniform(s->rng) * total;
    for (int32_t i = 0; i < n; i++) {
        r -= s->c[i].p;
        if (r < 0) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

float ts_logprobs(const float *logits, int32_t n_vocab, int32_t chosen, int k, int32_t *top_ids,
                  float *top_lp) {
    if (k > TS_LOGPROBS_MAX_TOP) k = TS_LOGPROBS_MAX_TOP;
    if (k > n_vocab) k = n_vocab;
    /* one pass for the max and the k best: top_ids[0 .. n) sorted, best first; a strict > keeps the lowest id
       on ties; worst: the k-th best's logit once there are k */
    float mx = logits[0], worst = 0;
    int n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float x = logits[i];
        if (x > mx) mx = x;
        if (k == 0 || (n == k && !(x > worst))) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && x > logits[top_ids[j - 1]]) top_ids[j] = top_ids[j - 1], j--;
        top_ids[j] = i;
        if (n == k) worst = logits[top_ids[k - 1]];
    }
    /* Σ e^(x − max): each term in float (within an ulp of the double's), the sum in double */
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += expf(logits[i] - mx);
    const double lse = mx + log(sum);
    for (int i = 0; i < n; i++) top_lp[i] = (float)((double)logits[top_ids[i]] - lse);
    return chosen >= 0 && chosen < n_vocab ? (float)((double)logits[chosen] - lse) : -INFINITY;
}
