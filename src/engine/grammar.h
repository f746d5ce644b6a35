/* Grammar-constrained sampling: a context-free grammar over bytes, the state of a sequence in it,
 * and the per-step mask of the tokens that may come next.
 *
 * The grammar: rules of alternatives of sequences of byte classes and rule references (the form
 * of llama.cpp's GBNF after parsing), built by json_schema.c; no left recursion. It runs on bytes,
 * not characters: a token's bytes are its text (special tokens have none and are never allowed,
 * except end-of-generation ones when the grammar can end there).
 *
 * The state (ts_matcher): the set of parse stacks the bytes so far allow (each stack the positions
 * still to match, innermost on top; the empty stack means "complete"), as llama.cpp keeps it.
 *
 * The mask: every token whose bytes keep the set non-empty. Tokens sit in a byte trie so shared
 * prefixes are advanced once and a dead prefix prunes its subtree. Inside a free JSON string
 * (the state does not change on any byte of PLAIN: 0x20..0xff less '"' and '\'), tokens made only
 * of such bytes are allowed at once from a precomputed bitset and only the others are walked, in a
 * second trie of those tokens (a few percent of a vocabulary).
 *
 * Bounds: a stack holds at most TS_GRAMMAR_MAX_DEPTH positions and a set at most
 * TS_GRAMMAR_MAX_STACKS stacks; a state past them fails with a sentence (a schema nested too deep or
 * too ambiguous). Memory: the vocabulary's tries (about 12 bytes a token byte) once per tokenizer;
 * per matcher a scratch of (longest token + 1) sets, allocated when it is created; a mask step
 * allocates nothing. */
#ifndef TS_ENGINE_GRAMMAR_H
#define TS_ENGINE_GRAMMAR_H

#include "tokenizer/tokenizer.h"
#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_GRAMMAR_MAX_DEPTH 96
#define TS_GRAMMAR_MAX_STACKS 256
#define TS_GRAMMAR_MAX_RULES 100000 /* bounds what a hostile schema or grammar can make us build */

typedef struct ts_grammar ts_grammar;

/* ---- building (json_schema.c) ---------------------------------------------------------------- */

/* A sequence being built: byte classes and rule references. */
typedef struct ts_gseq {
    uint32_t *sym; /* (kind << 30) | arg: kind 1 a class, 2 a rule */
    int n, cap;
    bool oom;
} ts_gseq;

ts_grammar *ts_grammar_new(void);
/* A new rule without alternatives: its id, or −1 (out of memory, or TS_GRAMMAR_MAX_RULES reached). */
int ts_grammar_rule(ts_grammar *g);
int ts_grammar_n_rules(const ts_grammar *g);
/* A byte class from a 256-bit set (bits[b >> 6] >> (b & 63) & 1); its id, or −1. */
int ts_grammar_class(ts_grammar *g, const uint64_t bits[4]);
int ts_grammar_range(ts_grammar *g, int lo, int hi); /* the class of bytes lo..hi */
void ts_gseq_class(ts_gseq *s, int cls);
void ts_gseq_ref(ts_gseq *s, int rule);
void ts_gseq_lit(ts_grammar *g, ts_gseq *s, const char *text, size_t n); /* the exact bytes */
void ts_gseq_free(ts_gseq *s);
/* Adds s as an alternative of rule (s is reset for reuse). 0 or −1 (out of memory). */
int ts_grammar_alt(ts_grammar *g, int rule, ts_gseq *s);
/* Freezes the grammar with its start rule. 0 or −1 with a sentence (a rule without alternatives). */
int ts_grammar_finish(ts_grammar *g, int root, char *err, size_t errlen);

/* ---- the vocabulary --------------------------------------------------------------------------- */

typedef struct ts_grammar_vocab ts_grammar_vocab;

/* ts_grammar_vocab_new and _free: include/turbospark.h. The same from raw tokens (benchmarks, tests): bytes[i][0 .. len[i]) (borrowed: they must outlive
 * the vocabulary), eog[i] for end-of-generation tokens. */
int ts_grammar_vocab_from_bytes(int32_t n, const char *const *bytes, const uint32_t *len, const bool *eog,
                                ts_grammar_vocab **out, char *err, size_t errlen);

/* ---- a sequence's state ----------------------------------------------------------------------- */

typedef struct ts_matcher ts_matcher;

/* ts_matcher_new, _free, _mask, _accept, _can_end, _must_end: include/turbospark.h. */
/* Moves past bytes (tests, and text the caller forced). 0 or −1. */
int ts_matcher_accept_bytes(ts_matcher *m, const char *s, size_t n, char *err, size_t errlen);

/* ts_mask_allows of the public header, inline for the sampler's loop. */
static inline bool ts_mask_get(const uint32_t *allow, int32_t id) {
    return (allow[id >> 5] >> (id & 31)) & 1;
}

#endif
