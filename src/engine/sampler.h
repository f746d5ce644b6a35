/* Token sampling from logits: penalties, then temperature, top-k, top-p, min-p, then a seeded
 * draw — the llama.cpp order and semantics, so users' settings mean the same thing here.
 *
 *   repetition penalty (CTRL-style: positive logits divided, negative multiplied) over the last
 *   `penalty_last_n` tokens; presence/frequency penalties (OpenAI): logit −= presence·[count>0] +
 *   frequency·count; temperature ≤ 0 means greedy (argmax, lowest id on ties); top_k ≤ 0 keeps all;
 *   top_p ≥ 1 keeps all; min_p ≤ 0 keeps all.
 *
 * The sampler owns a scratch buffer of n_vocab candidates and a token history ring; sampling
 * allocates nothing. Draws come from a xoshiro256** generator seeded by `seed`, so a fixed seed
 * reproduces a run exactly. */
#ifndef TS_ENGINE_SAMPLER_H
#define TS_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "turbospark.h"

/* ts_sampler_params, ts_sampler and the functions of the public API are in turbospark.h. */

/* llama.cpp's defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties). */
ts_sampler_params ts_sampler_default_params(void);

typedef struct ts_sampler ts_sampler;

/* Checks the parameters (a sentence for each bad one) and allocates for n_vocab. */
int ts_sampler_new(const ts_sampler_params *p, int32_t n_vocab, ts_sampler **out, char *err, size_t errlen);
/* The check ts_sampler_new and ts_sampler_configure make, alone: 0, or −1 with a sentence. Callers
 * that convert from wider types (the server's JSON doubles) check the converted floats with it. */
int ts_sampler_check(const ts_sampler_params *p, char *err, size_t errlen);
void ts_sampler_free(ts_sampler *s);
/* New parameters (checked as ts_sampler_new checks them), empty history, reseeded: one sampler
 * serves request after request without allocating. On failure the sampler is unchanged. */
int ts_sampler_configure(ts_sampler *s, const ts_sampler_params *p, char *err, size_t errlen);

/* Records a token of the context (prompt or generated) for the penalties. */
void ts_sampler_accept(ts_sampler *s, int32_t token);
void ts_sampler_reset(ts_sampler *s, uint64_t seed); /* clears the history, reseeds */

/* Picks the next token from logits[n_vocab] (not modified). */
int32_t ts_sampler_sample(ts_sampler *s, const float *logits);
/* The same among the tokens whose bit is set in allow[n_vocab / 32 + 1] (grammar.h's mask; at
 * least one must be): the others are gone after the penalties, before greedy or top-k. */
int32_t ts_sampler_sample_masked(ts_sampler *s, const float *logits, const uint32_t *allow);

#define TS_LOGPROBS_MAX_TOP 20

/* One generated token's log-probability and its most likely alternatives (ts_logprobs). */
typedef struct ts_token_logprobs {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[TS_LOGPROBS_MAX_TOP]; /* most likely first */
    float top_lp[TS_LOGPROBS_MAX_TOP];
} ts_token_logprobs;

/* Log-probabilities as OpenAI and vLLM report them by default: the log-softmax of the raw logits
 * the model produced (before penalties, temperature, truncation or a grammar's mask), in double
 * precision. Returns the log-probability of `chosen`; top_ids/top_lp[0 .. k) get the k most likely
 * tokens, most likely first (lowest id on ties), k ≤ TS_LOGPROBS_MAX_TOP. O(V·k) at worst. */
float ts_logprobs(const float *logits, int32_t n_vocab, int32_t chosen, int k, int32_t *top_ids, float *top_lp);

#endif
