/* The scheduler: continuous batching of completions over a fixed set of slots.
 *
 * One thread owns the model and n_slots slots; each slot is one ts_session sized at startup for
 * n_ctx tokens (nothing is allocated per request on the engine side), a sampler and a logits row.
 * HTTP threads submit jobs (already tokenized and checked) to a FIFO queue and wait on them.
 *
 * One step of the loop:
 *   1. under the lock: jobs whose client went away are cancelled and their slots freed; queued
 *      jobs take the free slots (a slot whose previous sequence is a strict prefix of the new
 *      prompt is preferred and that prefix is not evaluated again);
 *   2. without the lock: every decoding slot contributes its last sampled token; prefilling slots,
 *      oldest first, contribute their next chunk of at most `chunk` prompt tokens while the step's
 *      prefill budget (`step_tokens`) lasts (the oldest always gets one), so a long prompt never
 *      stalls the running streams for more than one budget's worth of compute; all of it goes
 *      to the engine as one ts_batch_eval;
 *   3. every slot that got logits samples a token, the text grows (streaming detokenizer + stop
 *      strings, engine/generate.h), and under the lock the final bytes are published to the job
 *      and its waiter is woken.
 * Constrained jobs (a grammar) sample among the tokens the grammar allows (grammar.h's mask,
 * computed in step 3 for that slot alone) once the reasoning, if any, is over. Thinking is tracked
 * by the <think> / </think> tokens; a job with a reasoning budget gets "\n</think>\n\n" forced, token
 * by token, after that many thinking tokens.
 * New jobs join between steps. Chunk boundaries of a prompt depend only on its own length (and the
 * prefix reused), never on what else runs, so a greedy request's output does not depend on load.
 *
 * Ownership: a job is reference-counted (the submitter and the scheduler); the last release frees it. */
#ifndef TS_SERVER_SCHED_H
#define TS_SERVER_SCHED_H

#include "engine/grammar.h"
#include "engine/sampler.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"
#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_JOB_MAX_STOPS 16

typedef struct ts_sched_params {
    int n_slots;         /* sequences decoded together */
    int64_t n_ctx;       /* tokens per slot */
    int64_t chunk;       /* prompt tokens a slot evaluates in one step */
    int64_t step_tokens; /* prompt tokens one step evaluates over all slots (≥ chunk) */
    int max_queue;       /* jobs waiting beyond the slots; more are refused */
    int threads;         /* CPU threads for the forward (0: the OpenMP default) */
    bool cache_prompt;   /* reuse a slot's previous sequence when it is a prefix of the new prompt */
    ts_backend backend;  /* where the slots' sessions run */
} ts_sched_params;

typedef struct ts_job_params {
    const int32_t *prompt; /* copied */
    size_t n_prompt;       /* ≥ 1 and < n_ctx */
    ts_sampler_params sp;
    const char *stops[TS_JOB_MAX_STOPS]; /* copied */
    int n_stops;
    int64_t max_tokens; /* ≥ 1; n_prompt + max_tokens ≤ n_ctx */
    bool ignore_eos;
    bool cache_prompt;
    ts_grammar *grammar;  /* NULL, or the job's own (freed with the job, even when refused) */
    bool think_open;      /* the prompt ends inside <think> */
    int64_t think_budget; /* thinking tokens before </think> is forced; −1: no limit */
} ts_job_params;

/* A snapshot of a job for its waiter. */
typedef struct ts_job_state {
    size_t n_text; /* bytes of final text published so far */
    bool done;
    ts_finish finish; /* when done */
    int64_t n_prompt, n_cached, n_gen;
    double mask_seconds; /* time spent computing grammar masks */
    char error[256];     /* when finish is TS_FINISH_ERROR */
} ts_job_state;

typedef struct ts_sched ts_sched;
typedef struct ts_job ts_job;

int ts_sched_new(ts_model *m, const ts_tokenizer *tok, const ts_sched_params *p, ts_metrics *mt,
                 ts_sched **out, char *err, size_t errlen);
/* Stops the thread (cancelling whatever is left) and frees the slots. */
void ts_sched_free(ts_sched *s);
size_t ts_sched_state_bytes(const ts_sched *s);

/* Queues a job. Returns it (one reference for the caller) or NULL with *busy set when the queue is
 * full or the server is draining (the caller answers 503), or with a sentence in err. */
ts_job *ts_sched_submit(ts_sched *s, const ts_job_params *jp, bool *busy, char *err, size_t errlen);

/* Waits up to timeout_ms for text beyond `have` bytes or the end; appends the new bytes to out
 * (may be NULL) and fills st. Returns 1 when something new happened, 0 on timeout. */
int ts_job_wait(ts_job *j, size_t have, int timeout_ms, ts_text *out, ts_job_state *st);
void ts_job_cancel(ts_job *j); /* the client went away; the slot is freed at the next step */
void ts_job_release(ts_job *j);

/* Shutdown: refuse new jobs, cancel the queued ones (TS_FINISH_SHUTDOWN); running ones go on
 * until `deadline` (monotonic seconds; 0 cancels them now). */
void ts_sched_drain(ts_sched *s, double deadline);
/* Waits up to timeout_ms until no job is queued or running; returns true when idle. */
bool ts_sched_wait_idle(ts_sched *s, int timeout_ms);

void ts_sched_gauges(ts_sched *s, ts_metrics_gauges *g);

#endif
