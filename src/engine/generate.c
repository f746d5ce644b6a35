/* The text of a generation as it grows token by token (see generate.h). */
#include "engine/generate.h"

#include "common/error.h"

#include <string.h>

void ts_textgen_init(ts_textgen *g, const ts_tokenizer *t, const char *const *stops, int n_stops,
                     ts_text *out) {
    memset(g, 0, sizeof *g);
    ts_detok_init(&g->d, t, false);
    g->stops = stops, g->n_stops = n_stops, g->out = out;
    g->safe = out->n;
}

size_t ts_textgen_safe(const ts_textgen *g) {
    return g->safe;
}

size_t ts_stop_overlap(const char *const *stops, int n_stops, const char *s, size_t n) {
    size_t best = 0;
    for (int k = 0; k < n_stops; k++) {
        size_t L = strlen(stops[k]);
        for (size_t m = L ? L - 1 : 0; m > best; m--)
            if (m <= n && memcmp(s + n - m, stops[k], m) == 0) {
                best = m;
                break;
            }
    }
    return best;
}

int ts_textgen_push(ts_textgen *g, int32_t id, char *err, size_t errlen) {
    if (g->stopped || g->finished) return ts_errf(err, errlen, "the generation is already over");
    if (ts_detok_push(&g->d, id, g->out, err, errlen)) return -1;
    ts_text *o = g->out;
    /* the earliest match of any stop string; none can start before g->safe */
    const char *first = NULL;
    for (int k = 0; k < g->n_stops; k++) {
        size_t L = strlen(g->stops[k]);
        if (!L || o->n < g->safe + L) continue;
        const char *hit = memmem(o->s + g->safe, o->n - g->safe, g->stops[k], L);
        if (hit && (!first || hit < first)) first = hit;
    }
    if (first) {
        o->n = (size_t)(first - o->s);
        if (o->s) o->s[o->n] = 0;
        g->safe = o->n;
        g->stopped = true;
        return 1;
    }
    g->safe = o->n - ts_stop_overlap(g->stops, g->n_stops, o->s, o->n);
    return 0;
}

int ts_textgen_finish(ts_textgen *g) {
    if (g->stopped || g->finished) return 0;
    g->finished = true;
    if (ts_detok_flush(&g->d, g->out)) return -1;
    g->safe = g->out->n;
    return 0;
}
