/* The reasoning of a thinking model, split off its answer: "<think>…</think>answer".
 *
 * Text (not tokens) goes in, in pieces of any size, so a tag split across tokens or across pieces
 * is recognised all the same. Two outputs grow: the reasoning and the content. What either gets is
 * final; bytes that might still turn out to be part of a tag are held back until the next piece
 * (or ts_think_finish) decides, never shown twice.
 *
 * The deepseek format of llama-server, which vLLM's qwen3 parser also follows:
 *   - opened: the prompt already opened the block (a thinking template ends its generation prompt
 *     with "<think>\n"): everything up to "</think>" is reasoning;
 *   - otherwise the text may open the block itself with "<think>" (leading whitespace allowed);
 *     text that starts any other way is all content;
 *   - the reasoning loses its leading and trailing newlines, the content its leading newlines
 *     after "</think>" (Qwen writes "<think>\nthought\n</think>\n\nanswer");
 *   - a text that ends inside the block (length, budget) leaves it all in the reasoning.
 * Memory: the held bytes are a few (the longest tag plus a run of newlines), in a ts_text. */
#ifndef TS_ENGINE_REASONING_H
#define TS_ENGINE_REASONING_H

#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

/* ts_reasoning_format, ts_think_split and their functions: include/turbospark.h. */

#endif
