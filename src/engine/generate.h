/* What every text generator shares (turbospark run, chat and serve): the text of a generation as it
 * grows token by token (the file's recommended sampling is ts_model_sampling of the public header).
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

/* ts_textgen and its functions: include/turbospark.h. */

/* Length of the longest suffix of s[0..n) that is a proper prefix of one of the stop strings
 * (exported for tests). */
size_t ts_stop_overlap(const char *const *stops, int n_stops, const char *s, size_t n);

#endif
