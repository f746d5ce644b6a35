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

/* ts_sampler_params, ts_sampler, their functions (ts_sampler_new, _check, _configure, _reset,
 * _accept, _sample, _sample_masked) and ts_logprobs: include/turbospark.h. */

#endif
