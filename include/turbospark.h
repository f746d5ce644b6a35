/* turbospark: the public C API.
 *
 * Boundary: a ts_model is a loaded, validated GGUF file (read-only, shareable between sessions);
 * a ts_session is one sequence's state (caches, recurrent states, n-gram context), sized once at
 * creation for its context length, so decoding allocates nothing. Sessions of one model may run
 * in one batched call (continuous batching) and are independent otherwise.
 *
 * Errors: every function that can fail returns 0 on success or −1 and writes one sentence into
 * (err, errlen) — what was wrong, where, and what was expected. err may be NULL.
 *
 * Threads: a model may be used by several sessions; one session is used by one thread at a time.
 * Memory: the model maps its file; each session owns its state (ts_session_state_bytes). */
#ifndef TURBOSPARK_H
#define TURBOSPARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_model ts_model;
typedef struct ts_session ts_session;

/* Opens and binds a qwen4exp GGUF (spec: every key and tensor is checked before use). */
int ts_model_load(const char *path, ts_model **out, char *err, size_t errlen);
void ts_model_free(ts_model *m);

/* Vocabulary size (rows of the logits) and the trained context length. */
int32_t ts_model_n_vocab(const ts_model *m);
int64_t ts_model_n_ctx_train(const ts_model *m);

typedef struct ts_session_params {
    int64_t n_ctx;  /* tokens the session can hold (prompt + generated); ≥ 1 */
    int64_t ubatch; /* largest chunk one forward call processes (prefill micro-batch); ≥ 1 */
} ts_session_params;

int ts_session_new(ts_model *m, const ts_session_params *p, ts_session **out, char *err, size_t errlen);
void ts_session_free(ts_session *s);
void ts_session_reset(ts_session *s);              /* back to an empty sequence */
int64_t ts_session_pos(const ts_session *s);       /* tokens consumed so far */
size_t ts_session_state_bytes(const ts_session *s); /* state + workspaces, fixed at creation */

/* Feeds n tokens (any n ≥ 1: longer inputs are split into ubatch chunks) and writes the logits of
 * the last token into logits[n_vocab] (or of every token into logits[n × n_vocab] when all is
 * true; logits may be NULL). Refuses ids outside the vocabulary and inputs past n_ctx. */
int ts_session_eval(ts_session *s, const int32_t *ids, int64_t n, float *logits, bool all, char *err, size_t errlen);

/* One batched step over several sessions of the same model: session i consumes ids[i][0..n[i])
 * and gets the logits of its last token in logits[i][n_vocab]. Equivalent to calling
 * ts_session_eval on each. */
int ts_batch_eval(ts_session *const *s, const int32_t *const *ids, const int64_t *n, float *const *logits, int n_seq,
                  char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
