/* The scheduler: continuous batching of completions over a fixed set of slots.
 *
 * One thread owns the model and n_slots slots; each slot is one ts_session sized at startup for
 * n_ctx tokens (nothing is allocated per request on the engine side), a sampler and a logits row.
 * HTTP threads submit jobs (already tokenized and checked) to a FIFO queue and wait on them.
 *
 * One step of the loop:
 *   1. under the lock: jobs whose client went away are cancelled and their slots freed; queued
 *      jobs take the free slots in order (a slot whose previous sequence is a strict prefix of the
 *      new prompt is preferred and that prefix is not evaluated again; a longer prefix in the
 *      prefix cache is restored into the least recently used free slot instead; a job whose prompt
 *      shares more with a prompt being evaluated than it can reuse waits for that prefill's
 *      snapshot of the shared part, letting the jobs behind it pass: see sched.c);
 *   2. without the lock: every decoding slot contributes its last sampled token; prefilling slots,
 *      oldest first, contribute their next chunk of at most `chunk` prompt tokens while the step's
 *      prefill budget (`step_tokens`) lasts (the oldest always gets one), so a long prompt never
 *      stalls the running streams for more than one budget's worth of compute; all of it goes
 *      to the engine as one ts_batch_eval;
 *   3. every slot that got logits (or whose whole prompt came from the prefix cache) samples a token, the
 * text grows (streaming detokenizer + stop strings, engine/generate.h), and under the lock the final bytes
 * are published to the job and its waiter is woken. A job of n choices (n > 1) takes n slots at once: the
 * first evaluates the prompt, the others wait; then its state is copied into theirs (ts_session_copy: the
 * prompt is evaluated once) and each samples with its own stream of random numbers (seed + choice index).
 * Constrained jobs (a grammar) sample among the tokens the grammar allows (grammar.h's mask,
 * computed in step 3 for that slot alone) once the reasoning, if any, is over. Thinking is tracked
 * by the <think> / </think> tokens; a job with a reasoning budget gets "\n</think>\n\n" forced, token
 * by token, after that many thinking tokens.
 * New jobs join between steps. Chunk boundaries of a prompt depend only on its own length (and the
 * prefix reused; with the prefix cache on, chunks also end at every multiple of cache_every), never
 * on what else runs, so a greedy request's output does not depend on load.
 *
 * Slot actions (GET /slots, POST /slots/{id}?action=save|restore|erase with --slot-save-path) run in
 * the caller's thread on an idle slot that is set aside meanwhile (admission skips it); a restored
 * slot is reused like any slot whose sequence is a prefix of a new prompt.
 *
 * Ownership: a job is reference-counted (the submitter and the scheduler); the last release frees it. */
#ifndef TS_SERVER_SCHED_H
#define TS_SERVER_SCHED_H

#include "server/metrics.h"
#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_JOB_MAX_STOPS 16
#define TS_JOB_MAX_CHOICES 16

typedef struct ts_sched_params {
    int n_slots;            /* sequences decoded together */
    int64_t n_ctx;          /* tokens per slot */
    int64_t chunk;          /* prompt tokens a slot evaluates in one step */
    int64_t step_tokens;    /* prompt tokens one step evaluates over all slots (≥ chunk) */
    int max_queue;          /* jobs waiting beyond the slots; more are refused */
    int threads;            /* CPU threads for the forward (0: the OpenMP default) */
    bool cache_prompt;      /* reuse a slot's previous sequence when it is a prefix of the new prompt */
    size_t cache_bytes;     /* the prefix cache's budget in host memory, its tree included (0: off) */
    size_t cache_gpu_bytes; /* CUDA: GPU memory reserved for the cache's snapshots, spilled to host
                               memory when full (0: snapshots in host memory only) */
    int64_t cache_every;    /* prompt tokens between snapshots in a prefill (0: at prompt ends only) */
    ts_backend backend;     /* where the slots' sessions run */
    bool random_weights;    /* CUDA: weights filled with random valid blocks (ts_cuda_params) */
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
    int n_choices;        /* 1 .. TS_JOB_MAX_CHOICES (0: 1), at most the slots; n > 1 on the CPU backend */
    int logprobs;         /* −1: none; else each generated token's log-probability and this many top ones */
} ts_job_params;

/* A snapshot of a job for its waiter. */
typedef struct ts_job_state {
    uint64_t version;                  /* grows with every publication (for ts_job_wait) */
    bool done;                         /* every choice is over */
    ts_finish finish;                  /* when done: the first choice's, or an error's */
    int64_t n_prompt, n_cached, n_gen; /* n_gen: all choices together */
    double mask_seconds;               /* time spent computing grammar masks */
    char error[256];                   /* when finish is TS_FINISH_ERROR */
    int n_choices;
    struct {
        size_t n_text, n_lp; /* bytes of final text, and token log-probabilities, published so far */
        bool done;
        ts_finish finish;
        int64_t n_gen;
    } ch[TS_JOB_MAX_CHOICES];
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

/* Waits up to timeout_ms for a publication past `seen` (a version from an earlier state; 0 at
 * first) or the end, and fills st. Returns 1 when something new happened, 0 on timeout. */
int ts_job_wait(ts_job *j, uint64_t seen, int timeout_ms, ts_job_state *st);
/* Choice c's text from byte text_from on (appended to out, which may be NULL) and its token
 * log-probabilities from entry lp_from on (a malloc'd copy in *lp, *n_lp entries; lp may be NULL).
 * 0, or −1 when out of memory. */
int ts_job_read(ts_job *j, int c, size_t text_from, ts_text *out, size_t lp_from, ts_token_logprobs **lp,
                size_t *n_lp);
void ts_job_cancel(ts_job *j); /* the client went away; the slot is freed at the next step */
void ts_job_release(ts_job *j);

/* Shutdown: refuse new jobs, cancel the queued ones (TS_FINISH_SHUTDOWN); running ones go on
 * until `deadline` (monotonic seconds; 0 cancels them now). */
void ts_sched_drain(ts_sched *s, double deadline);
/* Waits up to timeout_ms until no job is queued or running; returns true when idle. */
bool ts_sched_wait_idle(ts_sched *s, int timeout_ms);

void ts_sched_gauges(ts_sched *s, ts_metrics_gauges *g);

/* ---- slots, one by one (GET /slots, POST /slots/{id}?action=...: llama-server's) -------------- */

typedef struct ts_slot_info {
    bool processing;  /* running a request, or in a save, restore or erase */
    int64_t n_tokens; /* the tokens its state holds: a prompt that extends them skips them */
} ts_slot_info;
/* out[0 .. n_slots) */
void ts_sched_slots(ts_sched *s, ts_slot_info *out);

/* Save, restore and erase run in the caller's thread on an idle slot, which the scheduler leaves
 * alone meanwhile (no request is admitted into it; queued ones wait for another slot). */
typedef enum ts_slot_status {
    TS_SLOT_OK = 0,
    TS_SLOT_NO_SUCH,  /* no slot of that id */
    TS_SLOT_BUSY,     /* the slot is running a request or another slot action */
    TS_SLOT_MISSING,  /* restore: no such file */
    TS_SLOT_BAD_FILE, /* restore: not a slot file of this model, or damaged (the slot is unchanged);
                         save: the name is taken by something other than a file */
    TS_SLOT_FAILED,   /* the state could not be taken, written or loaded */
} ts_slot_status;

typedef struct ts_slot_result {
    int64_t n_tokens; /* saved, restored or erased */
    uint64_t n_bytes; /* written or read */
    double ms;
} ts_slot_result;

/* Writes slot id's state and tokens to dir/name (slotfile.h). */
ts_slot_status ts_sched_slot_save(ts_sched *s, int id, const char *dir, const char *name, ts_slot_result *r,
                                  char *err, size_t errlen);
/* Loads dir/name into slot id: the next prompt that extends its tokens skips them. A file that is
 * refused leaves the slot as it was. */
ts_slot_status ts_sched_slot_restore(ts_sched *s, int id, const char *dir, const char *name,
                                     ts_slot_result *r, char *err, size_t errlen);
/* Empties slot id (its state is reset; the prefix cache keeps its own snapshots). */
ts_slot_status ts_sched_slot_erase(ts_sched *s, int id, ts_slot_result *r, char *err, size_t errlen);

#endif
