/* What every text generator shares (turbospark run, chat and serve): the file's recommended
 * the text of a generation as it grows token by token (the file's recommended sampling is
 * ts_model_sampling of the public header).
 *
 * ts_textgen turns sampled ids into text that is safe to show at every moment:
 *   - the streaming detokenizer holds back the bytes of a character split across tokens, so what
 *     is released is always valid UTF-8;
 *   - stop strings: when the text contains one, the text is cut just before the earliest match
 *     and the generation is over; until then, the longest tail of the text that could still grow
 *     into a stop string is held back, so no caller ever shows the beginning of a stop string.
 * Released bytes never change afterwards: out->s[0 .. ts_textgen_safe()) is final.
 *
 * Memory: the text grows in a caller's ts_text; the stop strings are borrowed (they must outlive
 * the ts_textgen). */
#ifndef TS_ENGINE_GENERATE_H
#define TS_ENGINE_GENERATE_H

#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct ts_textgen {
    ts_detok d;
    const char *const *stops; /* borrowed; n_stops non-empty strings */
    int n_stops;
    ts_text *out; /* the whole generated text (ends before the stop string once one is found) */
    size_t safe;  /* bytes of out that are final; no stop string can start before this byte */
    bool stopped; /* a stop string was found: nothing more may be pushed */
    bool finished;
} ts_textgen;

void ts_textgen_init(ts_textgen *g, const ts_tokenizer *t, const char *const *stops, int n_stops,
                     ts_text *out);

/* Appends the text of one token. Returns 1 when the text now contains a stop string (out is cut
 * before it and everything is released), 0 when generation may go on, −1 with err on failure
 * (an id outside the vocabulary, out of memory). */
int ts_textgen_push(ts_textgen *g, int32_t id, char *err, size_t errlen);

/* The generation is over (end-of-generation token, length, cancel): flushes the detokenizer's
 * held bytes (an incomplete character becomes U+FFFD) and releases everything. 0 or −1 (out of
 * memory). Nothing to do after a stop string. */
int ts_textgen_finish(ts_textgen *g);

/* Bytes of out that are final (may be shown). */
static inline size_t ts_textgen_safe(const ts_textgen *g) {
    return g->safe;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of one of the stop strings
 * (exported for tests). */
size_t ts_stop_overlap(const char *const *stops, int n_stops, const char *s, size_t n);

#endif
