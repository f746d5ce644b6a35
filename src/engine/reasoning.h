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

typedef enum ts_reasoning_format {
    TS_REASONING_NONE = 0,     /* the text as generated, all in content */
    TS_REASONING_DEEPSEEK = 1, /* <think> blocks split into reasoning_content */
} ts_reasoning_format;

/* "none" | "deepseek" (and "auto", llama-server's default, which is deepseek for Qwen) */
int ts_reasoning_format_from_name(const char *name, ts_reasoning_format *f, char *err, size_t errlen);

typedef struct ts_think_split {
    int state;     /* where the next byte goes (reasoning.c) */
    ts_text hold;  /* bytes not decided yet */
    bool answered; /* content has started (its leading newlines are dropped until then) */
} ts_think_split;

void ts_think_init(ts_think_split *t, bool opened);
void ts_think_free(ts_think_split *t);
/* Appends the decided part of s[0..n) to reasoning and content. 0 or −1 (out of memory). */
int ts_think_push(ts_think_split *t, const char *s, size_t n, ts_text *reasoning, ts_text *content);
/* The text is over: the held bytes go where they were heading. 0 or −1. */
int ts_think_finish(ts_think_split *t, ts_text *reasoning, ts_text *content);
/* Whether the split is inside the block now (for callers that count thinking). */
bool ts_think_inside(const ts_think_split *t);

/* Whether a rendered prompt ends inside an open <think> block (its last "<think>" is not closed). */
bool ts_prompt_opens_think(const char *prompt, size_t n);

#endif
