/* The continuous-batching scheduler (see sched.h for the step and the guarantees). */
#include "server/sched.h"

#include "server/prefix_tree.h"
#include "server/slotfile.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* One choice's output (under s->mu). */
typedef struct job_choice {
    ts_text text; /* final bytes only */
    ts_token_logprobs *lp;
    size_t n_lp, cap_lp;
    bool done;
    ts_finish finish;
    int64_t n_gen;
} job_choice;

struct ts_job {
    ts_sched *s;
    int refs;            /* under s->mu */
    ts_job *next, *prev; /* queue links while queued */
    bool queued;
    pthread_cond_t cond; /* with s->mu: new text or done */
    /* input: immutable after submit */
    int32_t *prompt;
    size_t n_prompt;
    ts_sampler_params sp;
    char *stops[TS_JOB_MAX_STOPS];
    int n_stops;
    int64_t max_tokens;
    bool ignore_eos, cache_prompt;
    ts_grammar *grammar;
    bool think_open;
    int64_t think_budget;
    int n_choices, logprobs;
    double t_submit;
    /* output: under s->mu */
    job_choice ch[TS_JOB_MAX_CHOICES];
    int n_done;       /* choices over */
    uint64_t version; /* grows with every publication */
    bool done, cancel;
    ts_finish finish;
    int64_t n_cached;
    double mask_seconds;
    double t_first; /* 0 until the first token */
    char error[256];
};

typedef struct slot {
    ts_session *sess;
    ts_sampler *smp;
    float *logits;     /* [n_vocab] */
    ts_tokens held;    /* the ids the session holds, in order (capacity n_ctx, never reallocated) */
    uint64_t last_use; /* admission counter: oldest first for prefill, least recently used for eviction */
    /* slot actions (save, restore, erase: ts_sched_slot_*), under s->mu */
    bool reserved; /* taken by a slot action: no job is admitted into it */
    bool touched;  /* restored: the most recently used slot at the next admission */
    int64_t n_pub; /* held.n as last published (GET /slots) */
    /* the running job (scheduler thread only, except `job`, which is also read under the lock) */
    ts_job *job;
    int choice;   /* which of the job's choices this slot computes */
    bool waiting; /* a choice > 0 waiting for the first choice's prompt (then copied) */
    bool has_lp;  /* lp holds this step's token, to publish */
    bool ready;   /* the whole prompt came from the prefix cache, logits included: sample without a step */
    ts_token_logprobs lp;
    size_t fed;    /* prompt tokens the session holds */
    bool decoding; /* the prompt is done; `next` is the token to feed */
    int32_t next;
    int64_t n_gen;
    ts_text text; /* the generated text so far */
    ts_textgen tg;
    size_t published; /* bytes of text already copied to the job */
    ts_finish fin;    /* set when this step finished the job */
    char err[256];
    /* constrained decoding and reasoning */
    ts_matcher *mt;        /* the job's grammar state, or NULL */
    uint32_t *allow;       /* [n_vocab / 32 + 1] mask */
    double mask_s;         /* seconds of masks for this job */
    bool thinking;         /* inside <think> */
    int64_t n_think;       /* tokens generated inside it */
    const int32_t *forced; /* tokens to emit instead of sampling: forced[0 .. n_forced) */
    int n_forced;
    /* this step */
    int64_t step_n;
    bool in_step;
} slot;

struct ts_sched {
    ts_model *m;
    const ts_tokenizer *tok;
    ts_metrics *mt;
    ts_sched_params p;
    int32_t n_vocab;
    ts_grammar_vocab *gvocab;              /* the tokenizer's tries for grammar masks */
    int32_t think_open_id, think_close_id; /* −1 when the vocabulary lacks them */
    ts_tokens close_seq;                   /* "\n</think>\n\n" */
    slot *slots;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job arrived, was cancelled, or the server is stopping */
    pthread_cond_t idle; /* nothing queued or running */
    ts_job *q_head, *q_tail;
    int q_len, n_active;
    bool draining, quit;
    double deadline; /* draining: running jobs are cancelled after this (0: at once) */
    uint64_t counter;
    /* batch arrays, [n_slots] */
    ts_session **b_sess;
    const int32_t **b_ids;
    int64_t *b_n;
    float **b_logits;
    int *b_slot, *order;
    /* the step's slots to sample, [n_slots]: their indices, and whether a reply that ends there goes into the
       prefix cache */
    int *todo;
    bool *todo_put;
    ts_prefix_tree *cache;    /* the prefix cache (NULL: off): scheduler thread only */
    double sample_s, cache_s; /* this step's host time sampling and saving snapshots (for the metrics) */
};

/* ---- jobs ----------------------------------------------------------------------------------- */

static void job_free(ts_job *j) {
    free(j->prompt);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    for (int c = 0; c < TS_JOB_MAX_CHOICES; c++) ts_text_free(&j->ch[c].text), free(j->ch[c].lp);
    ts_grammar_free(j->grammar);
    pthread_cond_destroy(&j->cond);
    free(j);
}

static void job_unref_locked(ts_job *j) {
    if (--j->refs == 0) job_free(j);
}

void ts_job_release(ts_job *j) {
    if (!j) return;
    ts_sched *s = j->s;
    pthread_mutex_lock(&s->mu);
    job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
}

static void queue_remove(ts_sched *s, ts_job *j) {
    if (j->prev)
        j->prev->next = j->next;
    else
        s->q_head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        s->q_tail = j->prev;
    j->next = j->prev = NULL;
    j->queued = false;
    s->q_len--;
}

/* Marks a job over, wakes its waiter, records it and drops the scheduler's reference. Under mu. */
static void finish_locked(ts_sched *s, ts_job *j, ts_finish why, const char *err) {
    j->done = true;
    j->finish = why;
    j->version++;
    if (err && !j->error[0]) snprintf(j->error, sizeof j->error, "%s", err);
    double now = ts_now();
    ts_metrics_finish(s->mt, why, j->n_cached, now - j->t_submit,
                      j->t_first > 0 ? j->t_first - j->t_submit : -1);
    pthread_cond_broadcast(&j->cond);
    pthread_cond_broadcast(&s->idle);
    job_unref_locked(j);
}

ts_job *ts_sched_submit(ts_sched *s, const ts_job_params *jp, bool *busy, char *err, size_t errlen) {
    *busy = false;
    ts_grammar *grammar = jp->grammar; /* ours from here on */
    if (jp->n_prompt < 1 || (int64_t)jp->n_prompt >= s->p.n_ctx || jp->max_tokens < 1 ||
        (int64_t)jp->n_prompt + jp->max_tokens > s->p.n_ctx || jp->n_stops < 0 ||
        jp->n_stops > TS_JOB_MAX_STOPS || jp->n_choices < 0 || jp->n_choices > TS_JOB_MAX_CHOICES ||
        jp->n_choices > s->p.n_slots || jp->logprobs > TS_LOGPROBS_MAX_TOP)
        return ts_errf(err, errlen,
                       "a job of %zu prompt tokens and up to %" PRId64 " more (%d choices, %d top "
                       "log-probabilities) does not fit slots of %" PRId64 " tokens (%d slots)",
                       jp->n_prompt, jp->max_tokens, jp->n_choices, jp->logprobs, s->p.n_ctx, s->p.n_slots),
               ts_grammar_free(grammar), NULL;
    for (size_t i = 0; i < jp->n_prompt; i++)
        if (jp->prompt[i] < 0 || jp->prompt[i] >= s->n_vocab)
            return ts_errf(err, errlen, "token id %" PRId32 " is outside the vocabulary (0..%" PRId32 ")",
                           jp->prompt[i], s->n_vocab - 1),
                   ts_grammar_free(grammar), NULL;
    ts_job *j = calloc(1, sizeof *j);
    if (!j) return ts_errf(err, errlen, "out of memory"), ts_grammar_free(grammar), NULL;
    j->grammar = grammar;
    j->think_open = jp->think_open;
    j->think_budget = jp->think_budget;
    j->n_choices = jp->n_choices > 0 ? jp->n_choices : 1;
    j->logprobs = jp->logprobs < 0 ? -1 : jp->logprobs;
    {
        char e2[200];
        if (ts_sampler_check(&jp->sp, e2, sizeof e2)) {
            ts_grammar_free(grammar);
            free(j);
            return ts_errf(err, errlen, "%s", e2), NULL;
        }
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cond, &ca);
    pthread_condattr_destroy(&ca);
    j->s = s;
    j->prompt = malloc(jp->n_prompt * sizeof *j->prompt);
    bool oom = !j->prompt;
    if (!oom) memcpy(j->prompt, jp->prompt, jp->n_prompt * sizeof *j->prompt);
    j->n_prompt = jp->n_prompt;
    for (int i = 0; i < jp->n_stops && !oom; i++) {
        if (!(j->stops[i] = strdup(jp->stops[i])))
            oom = true;
        else
            j->n_stops = i + 1;
    }
    if (oom) {
        job_free(j);
        return ts_errf(err, errlen, "out of memory"), NULL;
    }
    j->sp = jp->sp;
    j->max_tokens = jp->max_tokens;
    j->ignore_eos = jp->ignore_eos;
    j->cache_prompt = jp->cache_prompt;
    j->t_submit = ts_now();
    j->refs = 2; /* the caller's and the scheduler's */

    pthread_mutex_lock(&s->mu);
    if (s->draining || s->quit || s->q_len >= s->p.max_queue) {
        pthread_mutex_unlock(&s->mu);
        job_free(j);
        *busy = true;
        return NULL;
    }
    j->prev = s->q_tail;
    if (s->q_tail)
        s->q_tail->next = j;
    else
        s->q_head = j;
    s->q_tail = j;
    j->queued = true;
    s->q_len++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return j;
}

static void timed_wait(pthread_cond_t *c, pthread_mutex_t *mu, int timeout_ms) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += timeout_ms / 1000;
    t.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(c, mu, &t);
}

int ts_job_wait(ts_job *j, uint64_t seen, int timeout_ms, ts_job_state *st) {
    ts_sched *s = j->s;
    pthread_mutex_lock(&s->mu);
    if (!j->done && j->version == seen && timeout_ms > 0) timed_wait(&j->cond, &s->mu, timeout_ms);
    int changed = j->done || j->version != seen;
    if (st) {
        st->version = j->version;
        st->done = j->done;
        st->finish = j->finish;
        st->n_prompt = (int64_t)j->n_prompt;
        st->n_cached = j->n_cached;
        st->n_gen = 0;
        st->mask_seconds = j->mask_seconds;
        snprintf(st->error, sizeof st->error, "%s", j->error);
        st->n_choices = j->n_choices;
        for (int c = 0; c < j->n_choices; c++) {
            const job_choice *h = &j->ch[c];
            st->ch[c].n_text = h->text.n, st->ch[c].n_lp = h->n_lp, st->ch[c].done = h->done || j->done;
            st->ch[c].finish = h->done ? h->finish : j->finish, st->ch[c].n_gen = h->n_gen;
            st->n_gen += h->n_gen;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return changed;
}

int ts_job_read(ts_job *j, int c, size_t text_from, ts_text *out, size_t lp_from, ts_token_logprobs **lp,
                size_t *n_lp) {
    ts_sched *s = j->s;
    int rc = 0;
    if (lp) *lp = NULL, *n_lp = 0;
    pthread_mutex_lock(&s->mu);
    const job_choice *h = &j->ch[c < 0 || c >= j->n_choices ? 0 : c];
    if (out && h->text.n > text_from) rc |= ts_text_append(out, h->text.s + text_from, h->text.n - text_from);
    if (lp && h->n_lp > lp_from) {
        if ((*lp = malloc((h->n_lp - lp_from) * sizeof **lp))) {
            memcpy(*lp, h->lp + lp_from, (h->n_lp - lp_from) * sizeof **lp);
            *n_lp = h->n_lp - lp_from;
        } else {
            rc = -1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc ? -1 : 0;
}

void ts_job_cancel(ts_job *j) {
    ts_sched *s = j->s;
    pthread_mutex_lock(&s->mu);
    if (!j->done) {
        j->cancel = true;
        if (j->queued) { /* never started: over at once */
            queue_remove(s, j);
            finish_locked(s, j, TS_FINISH_CANCELLED, NULL);
        }
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- slots ---------------------------------------------------------------------------------- */

/* Prompt tokens of j a slot can skip: its whole held sequence when that is a strict prefix. */
static size_t reusable(const ts_sched *s, const slot *sl, const ts_job *j) {
    if (!s->p.cache_prompt || !j->cache_prompt || sl->held.n == 0 || sl->held.n >= j->n_prompt) return 0;
    return memcmp(sl->held.ids, j->prompt, sl->held.n * sizeof *j->prompt) == 0 ? sl->held.n : 0;
}

static void slot_end_locked(ts_sched *s, slot *sl, ts_finish why, const char *err);

/* Neither running a job nor taken by a slot action. Under mu. */
static bool slot_free(const slot *sl) {
    return !sl->job && !sl->reserved;
}

/* ---- the prefix cache ----------------------------------------------------------------------- */
/* A longest-prefix map (prefix_tree.h) from token sequences to snapshots of the whole state after
 * them (GDN recurrent state and conv history, QSA K/V and indexer keys up to that position, PLE
 * context and conv history) and the logits of their last token: taken when a prompt has been
 * evaluated, when a reply ends, and every cache_every tokens of a prefill (without logits there); a
 * new prompt restores the longest entry that is a prefix of it (the whole of it, with its logits:
 * no evaluation at all before the first token).
 *
 * Two tiers on the CUDA backend. With cache_gpu_bytes (--cache-gpu), a snapshot's state is kept in
 * GPU memory the backend reserved for it (ts_session_snapshot_device: taking and restoring it are
 * device-to-device copies); to make room, the least recently used snapshots there are spilled to
 * pinned host memory (ts_snapshot_to_host). Host memory (--cache-ram) counts the tree's token ids
 * and nodes, every logits row and snapshot header, and the states in host memory: snapshots taken
 * there (the CPU backend, no GPU tier, or one larger than it) and spilled ones. Past that budget,
 * least recently used entries are evicted, whichever tier holds them; a spilled snapshot that
 * cannot fit even after the entries older than it went is evicted itself. A restore reads either
 * tier in place (a spilled snapshot is not moved back). The scheduler thread alone touches the
 * tree, so it needs no lock. */

static void cache_snap_free(void *snap) {
    ts_snapshot_free(snap);
}

static void cache_publish(ts_sched *s, const ts_metrics_cache_add *add) {
    ts_metrics_cache_now now = {.host_bytes = ts_prefix_tree_bytes(s->cache),
                                .entries = ts_prefix_tree_entries(s->cache)};
    ts_backend_info bi;
    if (s->p.cache_gpu_bytes && !ts_model_backend_info(s->m, TS_BACKEND_CUDA, &bi, NULL, 0)) {
        now.gpu_bytes = bi.snapshot_used_bytes;
        now.gpu_entries = bi.snapshot_count < now.entries ? bi.snapshot_count : now.entries;
    }
    ts_metrics_cache(s->mt, add, &now);
}

/* Spills the least recently used snapshot kept in GPU memory to host memory, after evicting the
 * entries older than it that host memory needs for it (or evicts it when it cannot fit there, or
 * when the copy fails). false when no snapshot is in GPU memory. */
static bool cache_spill_oldest(ts_sched *s, uint64_t *evicted, uint64_t *spills) {
    ts_prefix_entry *e = ts_prefix_tree_newer(s->cache, NULL);
    while (e && ts_snapshot_where(e->snap) != TS_SNAPSHOT_DEVICE) e = ts_prefix_tree_newer(s->cache, e);
    if (!e) return false;
    char err[256];
    uint64_t ev = 0;
    const size_t host = ts_snapshot_bytes(e->snap) + ts_snapshot_device_bytes(e->snap);
    const bool kept = ts_prefix_tree_set_snap_bytes(s->cache, e, host, &ev) == 0;
    *evicted += ev;
    if (kept && ts_snapshot_to_host(e->snap, err, sizeof err) == 0) {
        ++*spills;
        return true;
    }
    ts_prefix_tree_remove(s->cache, e); /* gives its GPU memory back */
    ++*evicted;
    return true;
}

/* A snapshot of sess for the cache: in GPU memory when that tier is on and the snapshot fits it
 * (spilling least recently used ones until a free block is large enough), else in host memory
 * unless larger than that whole budget (then nothing is copied). NULL when none is taken. */
static ts_snapshot *cache_snapshot(ts_sched *s, ts_session *sess, uint64_t *evicted, uint64_t *spills) {
    char err[256];
    ts_snapshot *snap = NULL;
    const size_t bytes = ts_session_snapshot_bytes(sess);
    if (s->p.cache_gpu_bytes && bytes <= s->p.cache_gpu_bytes) {
        bool room = ts_session_snapshot_fits_device(sess);
        while (!room && cache_spill_oldest(s, evicted, spills)) room = ts_session_snapshot_fits_device(sess);
        if (room && ts_session_snapshot_device(sess, &snap, err, sizeof err) == 0) return snap;
    }
    if (bytes > s->p.cache_bytes || ts_session_snapshot(sess, &snap, err, sizeof err)) return NULL;
    return snap;
}

/* Keeps the state sl's session holds (its held tokens), with its logits row when with_logits (the
 * end of a prompt or a reply; not in the middle of a prefill, where no logits were computed).
 * Failures (memory, or larger than the budget) only mean nothing is cached. */
static void cache_put(ts_sched *s, slot *sl, bool with_logits) {
    const size_t n = sl->held.n;
    if (!s->cache || n == 0 || !sl->job || !sl->job->cache_prompt) return;
    const double t0 = ts_now();
    const float *logits = with_logits ? sl->logits : NULL;
    uint64_t evicted = 0, spills = 0;
    ts_prefix_entry *e = ts_prefix_tree_get(s->cache, sl->held.ids, n);
    if (e) { /* kept already: no new snapshot, but its logits if it had none */
        ts_prefix_tree_touch(s->cache, e);
        if (logits) ts_prefix_tree_add_logits(s->cache, e, logits, &evicted);
    } else {
        ts_snapshot *snap = cache_snapshot(s, sl->sess, &evicted, &spills);
        uint64_t ev = 0;
        if (snap) ts_prefix_tree_put(s->cache, sl->held.ids, n, snap, ts_snapshot_bytes(snap), logits, &ev);
        evicted += ev;
    }
    cache_publish(s, &(ts_metrics_cache_add){.evictions = evicted, .spills = spills});
    s->cache_s += ts_now() - t0;
}

/* Starts choice c of j in sl (c > 0: waiting for choice 0's prompt). Under mu. A failure ends the
 * choice (and, through slot_end_locked, the choices waiting for it). */
static void slot_start(ts_sched *s, slot *sl, ts_job *j, size_t reuse, int c, ts_prefix_entry *ce) {
    char err[256];
    ts_sampler_params sp = j->sp;
    sp.seed += (uint64_t)c; /* each choice its own stream of random numbers */
    sl->job = j, sl->choice = c, sl->waiting = c > 0, sl->has_lp = false, sl->ready = false;
    s->n_active++;
    if (ts_sampler_configure(sl->smp, &sp, err, sizeof err)) { /* checked at submit: cannot happen */
        slot_end_locked(s, sl, TS_FINISH_ERROR, err);
        return;
    }
    const bool from_gpu = ce && ts_snapshot_where(ce->snap) == TS_SNAPSHOT_DEVICE;
    if (ce && ts_session_restore(sl->sess, ce->snap, err, sizeof err) == 0) { /* the prefix cache */
        memcpy(sl->held.ids, j->prompt, ce->n * sizeof *j->prompt); /* ce's tokens begin the prompt */
        sl->held.n = reuse = ce->n;
        ts_prefix_tree_touch(s->cache, ce);
        if (ce->n == j->n_prompt) { /* the whole prompt: its logits too */
            memcpy(sl->logits, ce->logits, (size_t)s->n_vocab * sizeof *sl->logits);
            sl->ready = true;
        }
        cache_publish(s, &(ts_metrics_cache_add){.hits = 1, .gpu_hits = from_gpu, .tokens = ce->n});
    } else if (ce) {
        reuse = 0;
    }
    if (reuse == 0) {
        ts_session_reset(sl->sess);
        sl->held.n = 0;
    }
    sl->n_pub = (int64_t)sl->held.n;
    ts_matcher_free(sl->mt);
    sl->mt = NULL;
    if (j->grammar && ts_matcher_new(j->grammar, s->gvocab, &sl->mt, err, sizeof err)) {
        slot_end_locked(s, sl, TS_FINISH_ERROR, err);
        return;
    }
    sl->thinking = j->think_open, sl->n_think = 0, sl->n_forced = 0, sl->mask_s = 0;
    for (size_t i = 0; i < j->n_prompt; i++) ts_sampler_accept(sl->smp, j->prompt[i]);
    sl->fed = reuse;
    sl->decoding = false;
    sl->n_gen = 0;
    sl->text.n = 0;
    ts_textgen_init(&sl->tg, s->tok, (const char *const *)j->stops, j->n_stops, &sl->text);
    sl->published = 0;
    sl->fin = TS_FINISH_NONE;
    sl->err[0] = 0;
    sl->last_use = ++s->counter;
    if (c == 0) j->n_cached = (int64_t)reuse;
}

/* Whether j should wait for a prompt being evaluated in another slot: when that prompt shares a
 * longer prefix with j's than j can reuse now (`have` tokens), and that slot has yet to reach the
 * snapshot it will take inside the shared part (the last multiple of cache_every in it, or the end
 * of its prompt when all of it is shared), j waits for the snapshot instead of evaluating the same
 * tokens at the same time: requests that arrive together with one long system prompt evaluate it
 * once. The wait ends when that slot passes the point, whether or not the snapshot was kept. */
static bool wait_for_prefix(const ts_sched *s, const ts_job *j, size_t have) {
    if (!s->p.cache_bytes || !s->p.cache_prompt || !j->cache_prompt) return false;
    for (int i = 0; i < s->p.n_slots; i++) {
        const slot *sl = &s->slots[i];
        const ts_job *o = sl->job;
        if (!o || sl->choice != 0 || sl->decoding || !o->cache_prompt) continue;
        const size_t n = o->n_prompt < j->n_prompt ? o->n_prompt : j->n_prompt;
        size_t shared = 0;
        while (shared < n && o->prompt[shared] == j->prompt[shared]) shared++;
        size_t at = 0; /* the snapshot of o's prefill that j could restore */
        if (shared == o->n_prompt)
            at = shared;               /* o's whole prompt, with its logits */
        else if (s->p.cache_every > 0) /* in the middle of a prompt: a strict prefix of j's */
            at = (shared < j->n_prompt ? shared : j->n_prompt - 1) / (size_t)s->p.cache_every *
                 (size_t)s->p.cache_every;
        if (at > have && sl->fed < at) return true;
    }
    return false;
}

/* Queued jobs take the free slots (a job of n choices, n of them at once): the longest reusable
 * prefix first, else the least recently used. Jobs start in order, except that one waiting for
 * another slot's prefill of its prefix (wait_for_prefix) lets those behind it pass. */
static void admit_locked(ts_sched *s) {
    for (int i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].touched) s->slots[i].touched = false, s->slots[i].last_use = ++s->counter;
    for (ts_job *j = s->q_head, *next; j && !s->draining; j = next) {
        next = j->next;
        int best = -1, n_free = 0;
        size_t best_reuse = 0;
        for (int i = 0; i < s->p.n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!slot_free(sl)) continue;
            n_free++;
            size_t r = reusable(s, sl, j);
            if (best < 0 || r > best_reuse || (r == best_reuse && sl->last_use < s->slots[best].last_use))
                best = i, best_reuse = r;
        }
        if (best < 0 || n_free < j->n_choices) return;
        ts_prefix_entry *ce = NULL;
        if (s->cache && j->cache_prompt && (ce = ts_prefix_tree_find(s->cache, j->prompt, j->n_prompt)) &&
            ce->n > best_reuse) {
            for (int i = 0; i < s->p.n_slots; i++) /* the least recently used free slot takes it */
                if (slot_free(&s->slots[i]) && s->slots[i].last_use <= s->slots[best].last_use) best = i;
            best_reuse = ce->n;
        } else {
            ce = NULL;
        }
        if (wait_for_prefix(s, j, best_reuse)) continue;
        queue_remove(s, j);
        j->refs += j->n_choices - 1;             /* one reference a slot */
        for (int c = 1; c < j->n_choices; c++) { /* the others (least recently used first) wait */
            int f = -1;
            for (int i = 0; i < s->p.n_slots; i++)
                if (i != best && slot_free(&s->slots[i]) &&
                    (f < 0 || s->slots[i].last_use < s->slots[f].last_use))
                    f = i;
            slot_start(s, &s->slots[f], j, 0, c, NULL);
        }
        slot_start(s, &s->slots[best], j, best_reuse, 0,
                   ce); /* last: if it fails, it ends the waiting ones */
    }
}

/* Ends the slot's choice; the job is over with its last choice. A first choice that ends while
 * others wait for its prompt ends them too. Under mu. */
static void slot_end_locked(ts_sched *s, slot *sl, ts_finish why, const char *err) {
    ts_job *j = sl->job;
    const bool first = sl->choice == 0;
    int drop = 0; /* slots let go, one reference each */
    for (int i = 0; i < s->p.n_slots; i++) {
        slot *o = &s->slots[i];
        if (o->job != j || (o != sl && !(first && o->waiting))) continue;
        job_choice *h = &j->ch[o->choice];
        o->job = NULL, o->waiting = false;
        s->n_active--, drop++;
        if (!h->done) h->done = true, h->finish = why, j->n_done++;
    }
    if (err && !j->error[0]) snprintf(j->error, sizeof j->error, "%s", err);
    j->version++;
    const bool last = j->n_done == j->n_choices;
    if (!last) pthread_cond_broadcast(&j->cond);
    for (int k = 0; k < drop - (last ? 1 : 0); k++) job_unref_locked(j); /* others still hold one */
    if (last) {
        ts_finish f = j->ch[0].finish;
        for (int c = 0; c < j->n_choices; c++)
            if (j->ch[c].finish == TS_FINISH_ERROR) f = TS_FINISH_ERROR;
        finish_locked(s, j, f, j->error[0] ? j->error : NULL); /* drops the last slot's reference */
    }
}

/* Cancelled jobs, and all running ones once a drain's deadline has passed. Under mu. */
static void reap_locked(ts_sched *s) {
    bool expired = s->quit || (s->draining && ts_now() >= s->deadline);
    for (int i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job) continue;
        if (sl->job->cancel)
            slot_end_locked(s, sl, TS_FINISH_CANCELLED, NULL);
        else if (expired)
            slot_end_locked(s, sl, TS_FINISH_SHUTDOWN, NULL);
    }
    if (s->draining || s->quit)
        while (s->q_head) {
            ts_job *j = s->q_head;
            queue_remove(s, j);
            finish_locked(s, j, TS_FINISH_SHUTDOWN, NULL);
        }
}

/* ---- the step ------------------------------------------------------------------------------- */

/* Samples after the slot's logits and grows its text; sets sl->fin when the job is over. */
/* The next token: forced (reasoning budget), sampled under the grammar's mask, or sampled. */
static int next_token(ts_sched *s, slot *sl, int32_t *id) {
    ts_job *j = sl->job;
    if (sl->thinking && !sl->n_forced && j->think_budget >= 0 && sl->n_think >= j->think_budget)
        sl->forced = s->close_seq.ids, sl->n_forced = (int)s->close_seq.n;
    if (sl->n_forced) {
        *id = *sl->forced++;
        if (--sl->n_forced == 0) sl->thinking = false; /* the forced text ends the block */
        return 0;
    }
    if (!sl->mt || sl->thinking) {
        *id = ts_sampler_sample(sl->smp, sl->logits);
        return 0;
    }
    double t0 = ts_now();
    int rc = ts_matcher_mask(sl->mt, sl->allow, sl->err, sizeof sl->err);
    sl->mask_s += ts_now() - t0;
    if (rc) return -1;
    *id = ts_sampler_sample_masked(sl->smp, sl->logits, sl->allow);
    if (!ts_mask_allows(sl->allow, *id))
        return snprintf(sl->err, sizeof sl->err, "the grammar allows no token here"), -1;
    return ts_tokenizer_is_eog(s->tok, *id) ? 0 : ts_matcher_accept(sl->mt, *id, sl->err, sizeof sl->err);
}

/* Samples after the slot's logits and grows its text; sets sl->fin when the job is over. */
static void slot_sample(ts_sched *s, slot *sl) {
    ts_job *j = sl->job;
    int32_t id;
    if (next_token(s, sl, &id)) {
        sl->fin = TS_FINISH_ERROR;
        return;
    }
    if (sl->thinking) {
        sl->n_think++;
        if (id == s->think_close_id) sl->thinking = false; /* a forced tail ("\n\n") still follows */
    } else if (id == s->think_open_id && sl->n_gen == 0 && !sl->mt) {
        sl->thinking = true;
    }
    bool grammar_done = sl->mt && !sl->thinking && ts_tokenizer_is_eog(s->tok, id); /* even with ignore_eos */
    if ((!j->ignore_eos || grammar_done) && ts_tokenizer_is_eog(s->tok, id)) {
        sl->fin = TS_FINISH_STOP;
    } else {
        int r = ts_textgen_push(&sl->tg, id, sl->err, sizeof sl->err);
        if (r < 0) {
            sl->fin = TS_FINISH_ERROR;
            return;
        }
        sl->n_gen++;
        if (j->logprobs >= 0) {
            sl->lp.id = id, sl->lp.n_top = j->logprobs;
            sl->lp.logprob =
                ts_logprobs(sl->logits, s->n_vocab, id, j->logprobs, sl->lp.top_id, sl->lp.top_lp);
            sl->has_lp = true;
        }
        if (r == 1)
            sl->fin = TS_FINISH_STOP;
        else if (sl->n_gen >= j->max_tokens || ts_session_pos(sl->sess) >= s->p.n_ctx)
            sl->fin = TS_FINISH_LENGTH;
        else {
            ts_sampler_accept(sl->smp, id);
            sl->next = id;
            sl->decoding = true;
        }
    }
    if (sl->fin && ts_textgen_finish(&sl->tg))
        snprintf(sl->err, sizeof sl->err, "out of memory"), sl->fin = TS_FINISH_ERROR;
}

/* Queues slot i to sample its next token (sample_queued); put: a reply that ends there goes into the
 * prefix cache. */
static void queue_sample(ts_sched *s, int i, int *nt, bool put) {
    s->todo[*nt] = i, s->todo_put[*nt] = put;
    (*nt)++;
}

/* The prompt of sl's job is done in sl (choice 0): the choices waiting for it get a copy of its
 * state and logits and are queued to sample their first token; they are appended to the slots to
 * publish (s->b_slot[*np ...]). */
static void start_waiting(ts_sched *s, slot *lead, int *np, int *nt) {
    for (int i = 0; i < s->p.n_slots; i++) {
        slot *f = &s->slots[i];
        if (f->job != lead->job || !f->waiting) continue;
        f->waiting = false;
        s->b_slot[(*np)++] = i;
        if (ts_session_copy(f->sess, lead->sess, f->err, sizeof f->err)) {
            f->fin = TS_FINISH_ERROR;
            continue;
        }
        memcpy(f->held.ids, lead->held.ids, lead->held.n * sizeof *f->held.ids);
        f->held.n = lead->held.n;
        f->fed = lead->fed;
        memcpy(f->logits, lead->logits, (size_t)s->n_vocab * sizeof *f->logits);
        queue_sample(s, i, nt, false);
    }
}

/* Samples the queued slots' next tokens (slot_sample), side by side on the OpenMP threads: each slot's
 * logits, sampler, grammar matcher and text are its own, and a slot's passes over the vocabulary (its
 * sampling and log-probabilities, ~1–2 ms of CPU at 248,320 entries) are the host's largest share of a
 * step with many streams. Then, in queue order, the replies that ended go into the prefix cache. Returns
 * the tokens generated. */
static uint64_t sample_queued(ts_sched *s, int nt) {
    const double t0 = ts_now();
    uint64_t n_gen = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : n_gen) if (nt > 1)
#endif
    for (int k = 0; k < nt; k++) {
        slot *sl = &s->slots[s->todo[k]];
        const int64_t before = sl->n_gen;
        slot_sample(s, sl);
        n_gen += (uint64_t)(sl->n_gen - before);
    }
    s->sample_s += ts_now() - t0;
    for (int k = 0; k < nt; k++) {
        slot *sl = &s->slots[s->todo[k]];
        if (s->todo_put[k] && (sl->fin == TS_FINISH_STOP || sl->fin == TS_FINISH_LENGTH))
            cache_put(s, sl, true); /* the reply's end */
    }
    return n_gen;
}

/* Builds the step's batch (decoders, then prefill chunks oldest first within the budget). */
static int build_batch(ts_sched *s) {
    int nb = 0, no = 0;
    for (int i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->in_step = false;
        if (!sl->job || sl->waiting || sl->ready) continue;
        if (sl->decoding) {
            sl->step_n = 1, sl->in_step = true;
            s->b_sess[nb] = sl->sess, s->b_ids[nb] = &sl->next, s->b_n[nb] = 1, s->b_logits[nb] = sl->logits;
            s->b_slot[nb++] = i;
        } else {
            int k = no++; /* insertion by admission order */
            while (k > 0 && s->slots[s->order[k - 1]].last_use > sl->last_use)
                s->order[k] = s->order[k - 1], k--;
            s->order[k] = i;
        }
    }
    int64_t budget = s->p.step_tokens;
    for (int o = 0; o < no; o++) {
        slot *sl = &s->slots[s->order[o]];
        const ts_job *j = sl->job;
        int64_t left = (int64_t)(j->n_prompt - sl->fed), k = left < s->p.chunk ? left : s->p.chunk;
        if (s->p.cache_bytes && s->p.cache_every > 0) { /* end a chunk at each snapshot point (every job: the
                                                           same cuts whether it is cached or not) */
            int64_t next = ((int64_t)sl->fed / s->p.cache_every + 1) * s->p.cache_every - (int64_t)sl->fed;
            if (next < k) k = next;
        }
        if (k > budget && o > 0) break;
        budget -= k;
        sl->step_n = k, sl->in_step = true;
        s->b_sess[nb] = sl->sess, s->b_ids[nb] = j->prompt + sl->fed, s->b_n[nb] = k;
        s->b_logits[nb] = k == left ? sl->logits : NULL;
        s->b_slot[nb++] = s->order[o];
    }
    return nb;
}

static void *sched_main(void *arg) {
    ts_sched *s = arg;
#ifdef _OPENMP
    if (s->p.threads > 0) omp_set_num_threads(s->p.threads); /* per thread: set where the forward runs */
#endif
    char err[512];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        reap_locked(s);
        admit_locked(s);
        if (s->n_active == 0) {
            pthread_cond_broadcast(&s->idle);
            if (s->quit) break;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);

        int nb = build_batch(s);
        double t0 = ts_now();
        int rc = ts_batch_eval(s->b_sess, s->b_ids, s->b_n, s->b_logits, nb, err, sizeof err);
        double dt = ts_now() - t0;
        uint64_t n_prompt = 0, n_gen = 0;
        int np = nb; /* slots to publish: the batch's, then choices started from a finished prompt */
        int nt = 0;  /* slots to sample */
        for (int b = 0; b < nb; b++) {
            slot *sl = &s->slots[s->b_slot[b]];
            if (rc) { /* the sessions are in an unknown state: start them over */
                ts_session_reset(sl->sess);
                sl->held.n = 0;
                sl->fin = TS_FINISH_ERROR;
                snprintf(sl->err, sizeof sl->err, "the engine failed: %.200s", err);
                continue;
            }
            for (int64_t t = 0; t < s->b_n[b]; t++) sl->held.ids[sl->held.n++] = s->b_ids[b][t];
            if (!sl->decoding) {
                sl->fed += (size_t)sl->step_n;
                n_prompt += (uint64_t)sl->step_n;
                if (sl->fed < sl->job->n_prompt) {
                    if (s->p.cache_every > 0 && sl->fed % (size_t)s->p.cache_every == 0)
                        cache_put(s, sl, false);
                    continue;
                }
                cache_put(s, sl, true);
                start_waiting(s, sl, &np, &nt);
            }
            queue_sample(s, s->b_slot[b], &nt, true);
        }
        for (int i = 0; !rc && i < s->p.n_slots; i++) { /* prompts restored whole: no step needed */
            slot *sl = &s->slots[i];
            if (!sl->job || !sl->ready) continue;
            sl->ready = false;
            s->b_slot[np++] = i;
            start_waiting(s, sl, &np, &nt);
            queue_sample(s, i, &nt, true);
        }
        n_gen += sample_queued(s, nt);
        ts_metrics_step(s->mt, nb, n_prompt, n_gen, dt);
        ts_metrics_host(s->mt, s->sample_s, s->cache_s);
        s->sample_s = s->cache_s = 0;

        pthread_mutex_lock(&s->mu);
        double now = ts_now();
        for (int b = 0; b < np; b++) {
            slot *sl = &s->slots[s->b_slot[b]];
            ts_job *j = sl->job;
            sl->n_pub = (int64_t)sl->held.n;
            if (!j) continue;
            job_choice *h = &j->ch[sl->choice];
            size_t safe = ts_textgen_safe(&sl->tg);
            bool changed = false;
            if (safe > sl->published) {
                if (ts_text_append(&h->text, sl->text.s + sl->published, safe - sl->published) == 0)
                    sl->published = safe, changed = true;
            }
            if (sl->has_lp) {
                sl->has_lp = false;
                if (h->n_lp == h->cap_lp) {
                    size_t cap = h->cap_lp ? 2 * h->cap_lp : 64;
                    ts_token_logprobs *lp = realloc(h->lp, cap * sizeof *lp);
                    if (lp) h->lp = lp, h->cap_lp = cap;
                }
                if (h->n_lp < h->cap_lp)
                    h->lp[h->n_lp++] = sl->lp, changed = true;
                else if (!sl->fin)
                    sl->fin = TS_FINISH_ERROR,
                    snprintf(sl->err, sizeof sl->err, "out of memory for log-probabilities");
            }
            if (sl->choice == 0) j->mask_seconds = sl->mask_s;
            if (sl->n_gen != h->n_gen) {
                if (j->t_first == 0) j->t_first = now;
                h->n_gen = sl->n_gen;
            }
            if (changed) j->version++;
            if (sl->fin)
                slot_end_locked(s, sl, sl->fin, sl->err[0] ? sl->err : NULL);
            else if (changed)
                pthread_cond_broadcast(&j->cond);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- life cycle ----------------------------------------------------------------------------- */

int ts_sched_new(ts_model *m, const ts_tokenizer *tok, const ts_sched_params *p, ts_metrics *mt,
                 ts_sched **out, char *err, size_t errlen) {
    *out = NULL;
    if (p->n_slots < 1 || p->n_slots > 1024)
        return ts_errf(err, errlen, "the number of slots must be 1 to 1024 (got %d)", p->n_slots);
    if (p->n_ctx < 8)
        return ts_errf(err, errlen, "a slot needs a context of at least 8 tokens (got %" PRId64 ")",
                       p->n_ctx);
    if (p->chunk < 1 || p->step_tokens < p->chunk)
        return ts_errf(err, errlen,
                       "the prefill chunk (%" PRId64
                       ") must be ≥ 1 and at most the tokens of a step (%" PRId64 ")",
                       p->chunk, p->step_tokens);
    if (p->cache_gpu_bytes && p->backend != TS_BACKEND_CUDA)
        return ts_errf(err, errlen,
                       "the prefix cache keeps snapshots in GPU memory on the CUDA backend only");
    if (p->cache_gpu_bytes && !(p->cache_bytes && p->cache_prompt))
        return ts_errf(err, errlen,
                       "GPU memory for the prefix cache needs the cache on (a host memory budget, prompt "
                       "caching on): its entries and logits live in host memory");
    ts_sched *s = calloc(1, sizeof *s);
    if (!s) return ts_errf(err, errlen, "out of memory");
    s->m = m, s->tok = tok, s->mt = mt, s->p = *p;
    s->n_vocab = ts_model_n_vocab(m);
    pthread_mutex_init(&s->mu, NULL);
    s->think_open_id = ts_tokenizer_find(tok, "<think>");
    s->think_close_id = ts_tokenizer_find(tok, "</think>");
    {
        static const char close[] = "\n</think>\n\n";
        char e2[256];
        if (ts_tokenize(tok, close, sizeof close - 1, true, &s->close_seq, e2, sizeof e2) ||
            ts_grammar_vocab_new(tok, &s->gvocab, e2, sizeof e2)) {
            ts_errf(err, errlen, "%s", e2);
            pthread_mutex_destroy(&s->mu);
            ts_tokens_free(&s->close_seq);
            free(s);
            return -1;
        }
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->work, &ca);
    pthread_cond_init(&s->idle, &ca);
    pthread_condattr_destroy(&ca);
    int n = p->n_slots;
    s->slots = calloc((size_t)n, sizeof *s->slots);
    s->b_sess = calloc((size_t)n, sizeof *s->b_sess);
    s->b_ids = calloc((size_t)n, sizeof *s->b_ids);
    s->b_n = calloc((size_t)n, sizeof *s->b_n);
    s->b_logits = calloc((size_t)n, sizeof *s->b_logits);
    s->b_slot = calloc((size_t)n, sizeof *s->b_slot);
    s->order = calloc((size_t)n, sizeof *s->order);
    s->todo = calloc((size_t)n, sizeof *s->todo);
    s->todo_put = calloc((size_t)n, sizeof *s->todo_put);
    if (!s->slots || !s->b_sess || !s->b_ids || !s->b_n || !s->b_logits || !s->b_slot || !s->order ||
        !s->todo || !s->todo_put) {
        ts_sched_free(s);
        return ts_errf(err, errlen, "out of memory");
    }
    ts_prefix_tree_params tp = {
        .budget = p->cache_bytes, .n_logits = (size_t)s->n_vocab, .free_snap = cache_snap_free};
    if (p->cache_bytes && p->cache_prompt && ts_prefix_tree_new(&tp, &s->cache)) {
        ts_sched_free(s);
        return ts_errf(err, errlen, "out of memory");
    }
    if (p->backend == TS_BACKEND_CUDA &&
        !ts_model_backend_ready(m, TS_BACKEND_CUDA)) { /* plan for every slot; one micro-batch holds a step */
        ts_cuda_params cp = {.plan_ctx = p->n_ctx,
                             .plan_seqs = n,
                             .progress = true,
                             .random_weights = p->random_weights,
                             .max_rows = p->step_tokens + n > p->chunk ? p->step_tokens + n : p->chunk,
                             .snapshot_bytes = s->p.cache_gpu_bytes};
        if (ts_model_cuda_init(m, &cp, err, errlen)) {
            ts_sched_free(s);
            return -1;
        }
    }
    if (s->p.cache_gpu_bytes) { /* the reservation the CUDA backend was set up with */
        ts_backend_info bi;
        int bad = ts_model_backend_info(m, TS_BACKEND_CUDA, &bi, err, errlen);
        if (!bad && bi.snapshot_bytes < s->p.cache_gpu_bytes)
            bad = ts_errf(
                err, errlen,
                "the model's CUDA backend was set up with %.0f MiB of GPU memory for snapshots, fewer than "
                "the %.0f MiB asked for the prefix cache",
                bi.snapshot_bytes / 1048576.0, s->p.cache_gpu_bytes / 1048576.0);
        if (bad) {
            ts_sched_free(s);
            return -1;
        }
    }
    ts_session_params sp = {.n_ctx = p->n_ctx, .ubatch = p->chunk, .backend = p->backend};
    for (int i = 0; i < n; i++) {
        slot *sl = &s->slots[i];
        char e2[512];
        if (ts_session_new(m, &sp, &sl->sess, e2, sizeof e2)) {
            ts_errf(err, errlen, "slot %d: %s", i, e2);
            ts_sched_free(s);
            return -1;
        }
        if (ts_sampler_new(&(ts_sampler_params){.temperature = 0, .top_p = 1, .repeat_penalty = 1},
                           s->n_vocab, &sl->smp, e2, sizeof e2)) {
            ts_errf(err, errlen, "slot %d: %s", i, e2);
            ts_sched_free(s);
            return -1;
        }
        sl->logits = malloc((size_t)s->n_vocab * sizeof *sl->logits);
        sl->allow = malloc(((size_t)s->n_vocab / 32 + 1) * sizeof *sl->allow);
        sl->held.ids = malloc((size_t)p->n_ctx * sizeof *sl->held.ids);
        sl->held.cap = (size_t)p->n_ctx;
        if (!sl->logits || !sl->held.ids || !sl->allow) {
            ts_sched_free(s);
            return ts_errf(err, errlen, "out of memory for slot %d", i);
        }
    }
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        ts_sched_free(s);
        return ts_errf(err, errlen, "cannot start the scheduler thread");
    }
    s->thread_started = true;
    *out = s;
    return 0;
}

void ts_sched_free(ts_sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; s->slots && i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        ts_session_free(sl->sess);
        ts_sampler_free(sl->smp);
        free(sl->logits);
        free(sl->allow);
        ts_matcher_free(sl->mt);
        ts_tokens_free(&sl->held);
        ts_text_free(&sl->text);
    }
    free(s->slots), free(s->b_sess), free(s->b_ids), free(s->b_n), free(s->b_logits), free(s->b_slot),
        free(s->order), free(s->todo), free(s->todo_put);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    ts_grammar_vocab_free(s->gvocab);
    ts_tokens_free(&s->close_seq);
    ts_prefix_tree_free(s->cache);
    free(s);
}

size_t ts_sched_state_bytes(const ts_sched *s) {
    size_t b = 0;
    for (int i = 0; i < s->p.n_slots; i++) b += ts_session_state_bytes(s->slots[i].sess);
    return b;
}

void ts_sched_drain(ts_sched *s, double deadline) {
    pthread_mutex_lock(&s->mu);
    if (!s->draining || deadline < s->deadline) s->deadline = deadline;
    s->draining = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

bool ts_sched_wait_idle(ts_sched *s, int timeout_ms) {
    pthread_mutex_lock(&s->mu);
    if (s->n_active || s->q_len) timed_wait(&s->idle, &s->mu, timeout_ms);
    bool idle = !s->n_active && !s->q_len;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void ts_sched_gauges(ts_sched *s, ts_metrics_gauges *g) {
    pthread_mutex_lock(&s->mu);
    g->queue_depth = s->q_len;
    g->slots_busy = s->n_active;
    g->slots_total = s->p.n_slots;
    g->n_ctx_slot = s->p.n_ctx;
    pthread_mutex_unlock(&s->mu);
}

/* ---- slots, one by one ---------------------------------------------------------------------- */
/* A slot action takes an idle slot (reserved, under the lock), works on its session and token list
 * in the caller's thread without the lock (the scheduler touches neither of an idle slot, and
 * admission skips reserved ones), then gives it back and wakes the scheduler for queued jobs. */

void ts_sched_slots(ts_sched *s, ts_slot_info *out) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->p.n_slots; i++)
        out[i] = (ts_slot_info){.processing = !slot_free(&s->slots[i]), .n_tokens = s->slots[i].n_pub};
    pthread_mutex_unlock(&s->mu);
}

static ts_slot_status slot_reserve(ts_sched *s, int id, slot **out, char *err, size_t errlen) {
    if (id < 0 || id >= s->p.n_slots)
        return ts_errf(err, errlen, "there is no slot %d: this server has slots 0 to %d", id,
                       s->p.n_slots - 1),
               TS_SLOT_NO_SUCH;
    pthread_mutex_lock(&s->mu);
    slot *sl = &s->slots[id];
    const bool free_ = slot_free(sl);
    if (free_) sl->reserved = true;
    pthread_mutex_unlock(&s->mu);
    if (!free_)
        return ts_errf(err, errlen,
                       "slot %d is processing a request; retry when it is idle (GET /slots shows "
                       "is_processing)",
                       id),
               TS_SLOT_BUSY;
    *out = sl;
    return TS_SLOT_OK;
}

static void slot_unreserve(ts_sched *s, slot *sl, bool touched) {
    pthread_mutex_lock(&s->mu);
    sl->reserved = false;
    sl->touched = touched;
    sl->n_pub = (int64_t)sl->held.n;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

ts_slot_status ts_sched_slot_save(ts_sched *s, int id, const char *dir, const char *name, ts_slot_result *r,
                                  char *err, size_t errlen) {
    *r = (ts_slot_result){0};
    slot *sl;
    ts_slot_status st = slot_reserve(s, id, &sl, err, errlen);
    if (st) return st;
    const double t0 = ts_now();
    int rc = ts_slotfile_save(dir, name, sl->sess, sl->held.ids, sl->held.n, &r->n_bytes, err, errlen);
    if (rc) st = rc == -2 ? TS_SLOT_BAD_FILE : TS_SLOT_FAILED;
    r->n_tokens = (int64_t)sl->held.n;
    r->ms = (ts_now() - t0) * 1e3;
    slot_unreserve(s, sl, false);
    return st;
}

ts_slot_status ts_sched_slot_restore(ts_sched *s, int id, const char *dir, const char *name,
                                     ts_slot_result *r, char *err, size_t errlen) {
    *r = (ts_slot_result){0};
    slot *sl;
    ts_slot_status st = slot_reserve(s, id, &sl, err, errlen);
    if (st) return st;
    const double t0 = ts_now();
    /* no slot file of this server is larger than a whole state, its tokens and the headers */
    const uint64_t max_bytes =
        ts_session_state_bytes(sl->sess) + (uint64_t)s->p.n_ctx * sizeof(int32_t) + 4096;
    ts_snapshot *snap = NULL;
    ts_tokens ids = {0};
    bool missing = false;
    char e2[512];
    if (ts_slotfile_load(dir, name, s->m, max_bytes, &snap, &ids, &r->n_bytes, &missing, err, errlen))
        st = missing ? TS_SLOT_MISSING : TS_SLOT_BAD_FILE;
    else if (ids.n > sl->held.cap)
        st = TS_SLOT_BAD_FILE,
        ts_errf(err, errlen, "'%s' holds %zu tokens, more than a slot's context of %" PRId64, name, ids.n,
                s->p.n_ctx);
    else if (ts_session_restore(sl->sess, snap, e2, sizeof e2)) /* checked before anything is written */
        st = TS_SLOT_BAD_FILE, ts_errf(err, errlen, "'%s': %s", name, e2);
    if (!st) {
        memcpy(sl->held.ids, ids.ids, ids.n * sizeof *ids.ids);
        sl->held.n = ids.n;
        r->n_tokens = (int64_t)ids.n;
    }
    ts_snapshot_free(snap);
    ts_tokens_free(&ids);
    r->ms = (ts_now() - t0) * 1e3;
    slot_unreserve(s, sl, !st);
    return st;
}

ts_slot_status ts_sched_slot_erase(ts_sched *s, int id, ts_slot_result *r, char *err, size_t errlen) {
    *r = (ts_slot_result){0};
    slot *sl;
    ts_slot_status st = slot_reserve(s, id, &sl, err, errlen);
    if (st) return st;
    const double t0 = ts_now();
    r->n_tokens = (int64_t)sl->held.n;
    ts_session_reset(sl->sess);
    sl->held.n = 0;
    r->ms = (ts_now() - t0) * 1e3;
    slot_unreserve(s, sl, false);
    return TS_SLOT_OK;
}
