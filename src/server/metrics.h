/* Server counters, exported as Prometheus text at GET /metrics.
 *
 * Everything is under one mutex: updates come a few times per request and once per scheduler step,
 * far below where a lock would show. Token rates are over the last TS_METRICS_WINDOW seconds,
 * kept in one-second buckets, so an idle server reports 0 rather than its lifetime average. */
#ifndef TS_SERVER_METRICS_H
#define TS_SERVER_METRICS_H

#include "turbospark.h"

#include <pthread.h>
#include <stdint.h>

#define TS_METRICS_WINDOW 10
#define TS_METRICS_N_LAT_BUCKETS 12

typedef enum ts_finish {
    TS_FINISH_NONE = 0,  /* still running */
    TS_FINISH_STOP,      /* end-of-generation token or a stop string */
    TS_FINISH_LENGTH,    /* max_tokens or the end of the context */
    TS_FINISH_CANCELLED, /* the client went away */
    TS_FINISH_SHUTDOWN,  /* the server is stopping (queued requests, or the drain deadline passed) */
    TS_FINISH_ERROR,     /* the engine failed (a sentence in the job's error) */
    TS_FINISH_N
} ts_finish;

const char *ts_finish_name(ts_finish f); /* "stop", "length", "cancelled", "shutdown", "error" */

/* Why the connection guard (guard.h) closed a connection. */
typedef enum ts_close_reason {
    TS_CLOSE_HEADER_DEADLINE, /* no whole request head within --header-timeout */
    TS_CLOSE_BODY_DEADLINE,   /* no whole body within --body-timeout */
    TS_CLOSE_IDLE_DEADLINE,   /* kept alive without a new request for --timeout */
    TS_CLOSE_EVICTED,  /* the oldest waiting connection, to make room (--max-parsing, --max-connections) */
    TS_CLOSE_SHUTDOWN, /* not being answered when the server began to stop */
    TS_CLOSE_N
} ts_close_reason;

/* Why a request ended without a response of ours. */
typedef enum ts_unanswered {
    TS_UNANSWERED_CLIENT_GONE, /* the client closed its end before the answer */
    TS_UNANSWERED_TIMEOUT,     /* libmicrohttpd's idle timeout, or the guard's deadlines */
    TS_UNANSWERED_HTTP_ERROR,  /* malformed HTTP: libmicrohttpd answered it itself (400, 413, 431, ...) */
    TS_UNANSWERED_SHUTDOWN,    /* the server stopped */
    TS_UNANSWERED_CLOSED,      /* the connection guard closed it (a deadline, or room for a new one) */
    TS_UNANSWERED_N
} ts_unanswered;

/* What the prefix cache did (counters, added up). */
typedef struct ts_metrics_cache_add {
    uint64_t hits;      /* prompts that restored a cached prefix */
    uint64_t gpu_hits;  /* of which from a snapshot in GPU memory */
    uint64_t tokens;    /* prompt tokens restored */
    uint64_t evictions; /* snapshots dropped (least recently used) */
    uint64_t spills;    /* snapshots moved from GPU memory to host memory */
} ts_metrics_cache_add;

/* What the prefix cache holds, by tier (gauges). */
typedef struct ts_metrics_cache_now {
    uint64_t host_bytes;  /* host memory: the tree, logits, snapshots' headers, states in host memory
                              (malloc'd or pinned): what --cache-ram counts */
    uint64_t entries;     /* snapshots, both tiers */
    uint64_t gpu_bytes;   /* GPU memory of the snapshots kept there (ranges rounded up to 256 bytes):
                              what --cache-gpu counts */
    uint64_t gpu_entries; /* snapshots whose state is in GPU memory */
} ts_metrics_cache_now;

typedef struct ts_metrics {
    pthread_mutex_t mu;
    double t_start; /* monotonic seconds at creation */
    /* HTTP */
    uint64_t http_by_code[6][100]; /* [status / 100][status % 100] for 100..599: responses we sent */
    uint64_t unanswered[TS_UNANSWERED_N];
    uint64_t conn_closed[TS_CLOSE_N];
    /* generation */
    uint64_t finished[TS_FINISH_N];
    uint64_t prompt_tokens, prompt_tokens_cached, gen_tokens, steps, step_sequences;
    double busy_seconds;   /* time spent in batched forward steps */
    double sample_seconds; /* the scheduler's time choosing the steps' tokens (and their log-probabilities) */
    double cache_seconds;  /* the scheduler's time saving states into the prefix cache */
    /* the prefix cache (sched.h) */
    ts_metrics_cache_add cache; /* totals since the start */
    ts_metrics_cache_now cache_now;
    /* latency of finished completions (submit to last token) and time to first token */
    uint64_t lat_count[TS_METRICS_N_LAT_BUCKETS + 1], ttft_count[TS_METRICS_N_LAT_BUCKETS + 1];
    double lat_sum, ttft_sum;
    uint64_t lat_n, ttft_n;
    /* rate buckets: tokens in the second `sec[i]` */
    int64_t sec[TS_METRICS_WINDOW + 1];
    uint64_t sec_prompt[TS_METRICS_WINDOW + 1], sec_gen[TS_METRICS_WINDOW + 1];
} ts_metrics;

int ts_metrics_init(ts_metrics *m);
void ts_metrics_destroy(ts_metrics *m);

void ts_metrics_http(ts_metrics *m, unsigned status);
void ts_metrics_unanswered(ts_metrics *m, ts_unanswered why);
void ts_metrics_conn_closed(ts_metrics *m, ts_close_reason why);
/* A scheduler step: sequences in it, prompt and generated tokens, seconds it took. */
void ts_metrics_step(ts_metrics *m, int n_seq, uint64_t prompt, uint64_t gen, double seconds);
/* Host time a step spent beside its forward: sampling its slots, saving prefix-cache snapshots. */
void ts_metrics_host(ts_metrics *m, double sample_seconds, double cache_seconds);
/* A finished completion: why, cached prompt tokens, total latency and time to first token (< 0: none). */
void ts_metrics_finish(ts_metrics *m, ts_finish why, int64_t cached, double latency, double ttft);

/* The prefix cache: what it did since the last call (added to the totals) and what it holds now. */
void ts_metrics_cache(ts_metrics *m, const ts_metrics_cache_add *add, const ts_metrics_cache_now *now);

/* Live gauges the scheduler owns, passed in when rendering. */
typedef struct ts_metrics_gauges {
    int queue_depth, slots_busy, slots_total;
    int64_t n_ctx_slot;
    int http_in_flight;
    int conn_by_phase[4]; /* connections waiting, reading a head, reading a body, being answered */
} ts_metrics_gauges;

/* Appends the Prometheus text exposition (version 0.0.4) to out. 0 or −1 (out of memory). */
int ts_metrics_render(ts_metrics *m, const ts_metrics_gauges *g, ts_text *out);

double ts_now(void); /* monotonic seconds */

#endif
