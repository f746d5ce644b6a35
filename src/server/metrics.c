/* Server counters and their Prometheus rendering (see metrics.h). */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const double k_lat_bounds[TS_METRICS_N_LAT_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                              1,    2.5,   5,    10,  30,   60};

double ts_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

const char *ts_finish_name(ts_finish f) {
    switch (f) {
    case TS_FINISH_STOP:
        return "stop";
    case TS_FINISH_LENGTH:
        return "length";
    case TS_FINISH_CANCELLED:
        return "cancelled";
    case TS_FINISH_SHUTDOWN:
        return "shutdown";
    case TS_FINISH_ERROR:
        return "error";
    default:
        return "none";
    }
}

int ts_metrics_init(ts_metrics *m) {
    memset(m, 0, sizeof *m);
    m->t_start = ts_now();
    for (int i = 0; i <= TS_METRICS_WINDOW; i++) m->sec[i] = -1;
    return pthread_mutex_init(&m->mu, NULL) ? -1 : 0;
}

void ts_metrics_destroy(ts_metrics *m) {
    pthread_mutex_destroy(&m->mu);
}

void ts_metrics_http(ts_metrics *m, unsigned status) {
    if (status < 100 || status > 599) return;
    pthread_mutex_lock(&m->mu);
    m->http_by_code[status / 100][status % 100]++;
    pthread_mutex_unlock(&m->mu);
}

void ts_metrics_unanswered(ts_metrics *m, ts_unanswered why) {
    pthread_mutex_lock(&m->mu);
    if ((unsigned)why < TS_UNANSWERED_N) m->unanswered[why]++;
    pthread_mutex_unlock(&m->mu);
}

void ts_metrics_conn_closed(ts_metrics *m, ts_close_reason why) {
    pthread_mutex_lock(&m->mu);
    if ((unsigned)why < TS_CLOSE_N) m->conn_closed[why]++;
    pthread_mutex_unlock(&m->mu);
}

/* The bucket of the current second (cleared when it is reused). Under mu. */
static int bucket(ts_metrics *m, int64_t sec) {
    int i = (int)(sec % (TS_METRICS_WINDOW + 1));
    if (m->sec[i] != sec) m->sec[i] = sec, m->sec_prompt[i] = 0, m->sec_gen[i] = 0;
    return i;
}

void ts_metrics_step(ts_metrics *m, int n_seq, uint64_t prompt, uint64_t gen, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->steps++;
    m->step_sequences += (uint64_t)n_seq;
    m->prompt_tokens += prompt;
    m->gen_tokens += gen;
    m->busy_seconds += seconds;
    int i = bucket(m, (int64_t)ts_now());
    m->sec_prompt[i] += prompt, m->sec_gen[i] += gen;
    pthread_mutex_unlock(&m->mu);
}

void ts_metrics_host(ts_metrics *m, double sample_seconds, double cache_seconds) {
    pthread_mutex_lock(&m->mu);
    m->sample_seconds += sample_seconds;
    m->cache_seconds += cache_seconds;
    pthread_mutex_unlock(&m->mu);
}

void ts_metrics_cache(ts_metrics *m, const ts_metrics_cache_add *add, const ts_metrics_cache_now *now) {
    pthread_mutex_lock(&m->mu);
    ts_metrics_cache_add *t = &m->cache;
    t->hits += add->hits, t->gpu_hits += add->gpu_hits, t->tokens += add->tokens;
    t->evictions += add->evictions, t->spills += add->spills;
    m->cache_now = *now;
    pthread_mutex_unlock(&m->mu);
}

static void observe(uint64_t *count, double *sum, uint64_t *n, double v) {
    for (int i = 0; i < TS_METRICS_N_LAT_BUCKETS; i++)
        if (v <= k_lat_bounds[i]) count[i]++;
    count[TS_METRICS_N_LAT_BUCKETS]++; /* +Inf */
    *sum += v, (*n)++;
}

void ts_metrics_finish(ts_metrics *m, ts_finish why, int64_t cached, double latency, double ttft) {
    pthread_mutex_lock(&m->mu);
    if (why > 0 && why < TS_FINISH_N) m->finished[why]++;
    if (cached > 0) m->prompt_tokens_cached += (uint64_t)cached;
    if (why == TS_FINISH_STOP || why == TS_FINISH_LENGTH) {
        observe(m->lat_count, &m->lat_sum, &m->lat_n, latency);
        if (ttft >= 0) observe(m->ttft_count, &m->ttft_sum, &m->ttft_n, ttft);
    }
    pthread_mutex_unlock(&m->mu);
}

__attribute__((format(printf, 2, 3))) static int appendf(ts_text *out, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    return ts_text_append(out, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static int histogram(ts_text *out, const char *name, const char *help, const uint64_t *count, double sum,
                     uint64_t n) {
    int rc = appendf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < TS_METRICS_N_LAT_BUCKETS; i++)
        rc |=
            appendf(out, "%s_bucket{le=\"%g\"} %llu\n", name, k_lat_bounds[i], (unsigned long long)count[i]);
    rc |=
        appendf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                (unsigned long long)count[TS_METRICS_N_LAT_BUCKETS], name, sum, name, (unsigned long long)n);
    return rc;
}

int ts_metrics_render(ts_metrics *m, const ts_metrics_gauges *g, ts_text *out) {
    pthread_mutex_lock(&m->mu);
    double now = ts_now();
    int64_t cur = (int64_t)now;
    uint64_t wp = 0, wg = 0;
    for (int i = 0; i <= TS_METRICS_WINDOW; i++) /* the last full seconds, not the one under way */
        if (m->sec[i] >= cur - TS_METRICS_WINDOW && m->sec[i] < cur)
            wp += m->sec_prompt[i], wg += m->sec_gen[i];
    int rc = 0;
    rc |= appendf(out, "# HELP turbospark_http_requests_total HTTP requests answered, by status code.\n"
                       "# TYPE turbospark_http_requests_total counter\n");
    for (int c = 1; c < 6; c++)
        for (int k = 0; k < 100; k++)
            if (m->http_by_code[c][k])
                rc |= appendf(out, "turbospark_http_requests_total{code=\"%d\"} %llu\n", c * 100 + k,
                              (unsigned long long)m->http_by_code[c][k]);
    static const char *const unanswered[TS_UNANSWERED_N] = {"client_gone", "timeout", "http_error",
                                                            "shutdown", "closed_by_guard"};
    rc |= appendf(
        out, "# HELP turbospark_http_requests_unanswered_total HTTP requests that ended without a response "
             "of ours, by reason (http_error: libmicrohttpd refused malformed HTTP itself).\n"
             "# TYPE turbospark_http_requests_unanswered_total counter\n");
    for (int i = 0; i < TS_UNANSWERED_N; i++)
        rc |= appendf(out, "turbospark_http_requests_unanswered_total{reason=\"%s\"} %llu\n", unanswered[i],
                      (unsigned long long)m->unanswered[i]);
    static const char *const closed[TS_CLOSE_N] = {"header_deadline", "body_deadline", "idle_deadline",
                                                   "evicted", "shutdown"};
    rc |= appendf(out,
                  "# HELP turbospark_http_connections_closed_total Connections the server closed to keep its "
                  "bounds, by reason.\n# TYPE turbospark_http_connections_closed_total counter\n");
    for (int i = 0; i < TS_CLOSE_N; i++)
        rc |= appendf(out, "turbospark_http_connections_closed_total{reason=\"%s\"} %llu\n", closed[i],
                      (unsigned long long)m->conn_closed[i]);
    static const char *const phase[4] = {"waiting", "head", "body", "answer"};
    rc |= appendf(out, "# HELP turbospark_http_connections Open connections, by phase.\n"
                       "# TYPE turbospark_http_connections gauge\n");
    for (int i = 0; i < 4; i++)
        rc |= appendf(out, "turbospark_http_connections{phase=\"%s\"} %d\n", phase[i], g->conn_by_phase[i]);
    rc |= appendf(out, "# HELP turbospark_requests_total Completions finished, by reason.\n"
                       "# TYPE turbospark_requests_total counter\n");
    for (int f = TS_FINISH_STOP; f < TS_FINISH_N; f++)
        rc |= appendf(out, "turbospark_requests_total{finish_reason=\"%s\"} %llu\n",
                      ts_finish_name((ts_finish)f), (unsigned long long)m->finished[f]);
    rc |= appendf(
        out,
        "# HELP turbospark_prompt_tokens_total Prompt tokens evaluated.\n"
        "# TYPE turbospark_prompt_tokens_total counter\nturbospark_prompt_tokens_total %llu\n"
        "# HELP turbospark_prompt_tokens_cached_total Prompt tokens not evaluated: a slot's previous "
        "sequence or the prefix cache.\n"
        "# TYPE turbospark_prompt_tokens_cached_total counter\nturbospark_prompt_tokens_cached_total %llu\n"
        "# HELP turbospark_generation_tokens_total Tokens generated.\n"
        "# TYPE turbospark_generation_tokens_total counter\nturbospark_generation_tokens_total %llu\n",
        (unsigned long long)m->prompt_tokens, (unsigned long long)m->prompt_tokens_cached,
        (unsigned long long)m->gen_tokens);
    rc |= appendf(
        out,
        "# HELP turbospark_prompt_tokens_per_second Prompt tokens evaluated per second over the last %d s.\n"
        "# TYPE turbospark_prompt_tokens_per_second gauge\nturbospark_prompt_tokens_per_second %.1f\n"
        "# HELP turbospark_generation_tokens_per_second Tokens generated per second over the last %d s.\n"
        "# TYPE turbospark_generation_tokens_per_second gauge\nturbospark_generation_tokens_per_second "
        "%.1f\n",
        TS_METRICS_WINDOW, (double)wp / TS_METRICS_WINDOW, TS_METRICS_WINDOW, (double)wg / TS_METRICS_WINDOW);
    rc |= appendf(out,
                  "# HELP turbospark_queue_depth Requests waiting for a slot.\n"
                  "# TYPE turbospark_queue_depth gauge\nturbospark_queue_depth %d\n"
                  "# HELP turbospark_slots_busy Slots running a request.\n"
                  "# TYPE turbospark_slots_busy gauge\nturbospark_slots_busy %d\n"
                  "# HELP turbospark_slots_total Slots (sequences decoded together).\n"
                  "# TYPE turbospark_slots_total gauge\nturbospark_slots_total %d\n"
                  "# HELP turbospark_slot_context_tokens Context of each slot in tokens.\n"
                  "# TYPE turbospark_slot_context_tokens gauge\nturbospark_slot_context_tokens %lld\n"
                  "# HELP turbospark_http_requests_in_flight HTTP requests being answered.\n"
                  "# TYPE turbospark_http_requests_in_flight gauge\nturbospark_http_requests_in_flight %d\n",
                  g->queue_depth, g->slots_busy, g->slots_total, (long long)g->n_ctx_slot, g->http_in_flight);
    rc |= appendf(
        out,
        "# HELP turbospark_batch_steps_total Batched forward steps.\n"
        "# TYPE turbospark_batch_steps_total counter\nturbospark_batch_steps_total %llu\n"
        "# HELP turbospark_batch_sequences_total Sequences summed over all steps (divide by steps: "
        "mean batch).\n"
        "# TYPE turbospark_batch_sequences_total counter\nturbospark_batch_sequences_total %llu\n"
        "# HELP turbospark_busy_seconds_total Seconds spent in forward steps.\n"
        "# TYPE turbospark_busy_seconds_total counter\nturbospark_busy_seconds_total %.3f\n"
        "# HELP turbospark_sample_seconds_total Seconds spent choosing the steps' tokens and their "
        "log-probabilities (after the forward).\n"
        "# TYPE turbospark_sample_seconds_total counter\nturbospark_sample_seconds_total %.3f\n"
        "# HELP turbospark_cache_save_seconds_total Seconds spent saving states into the prefix cache.\n"
        "# TYPE turbospark_cache_save_seconds_total counter\nturbospark_cache_save_seconds_total %.3f\n"
        "# HELP turbospark_uptime_seconds Seconds since the server started.\n"
        "# TYPE turbospark_uptime_seconds gauge\nturbospark_uptime_seconds %.1f\n",
        (unsigned long long)m->steps, (unsigned long long)m->step_sequences, m->busy_seconds,
        m->sample_seconds, m->cache_seconds, now - m->t_start);
    const ts_metrics_cache_now *c = &m->cache_now;
    rc |= appendf(
        out,
        "# HELP turbospark_prefix_cache_hits_total Requests that restored a cached prefix.\n"
        "# TYPE turbospark_prefix_cache_hits_total counter\nturbospark_prefix_cache_hits_total %llu\n"
        "# HELP turbospark_prefix_cache_tokens_total Prompt tokens restored from the prefix cache.\n"
        "# TYPE turbospark_prefix_cache_tokens_total counter\nturbospark_prefix_cache_tokens_total %llu\n"
        "# HELP turbospark_prefix_cache_evictions_total Snapshots evicted (least recently used).\n"
        "# TYPE turbospark_prefix_cache_evictions_total counter\n"
        "turbospark_prefix_cache_evictions_total %llu\n"
        "# HELP turbospark_prefix_cache_spills_total Snapshots moved from GPU memory to host memory "
        "(least recently used, when --cache-gpu is full).\n"
        "# TYPE turbospark_prefix_cache_spills_total counter\nturbospark_prefix_cache_spills_total %llu\n",
        (unsigned long long)m->cache.hits, (unsigned long long)m->cache.tokens,
        (unsigned long long)m->cache.evictions, (unsigned long long)m->cache.spills);
    rc |= appendf(
        out,
        "# HELP turbospark_prefix_cache_bytes Bytes of host memory the prefix cache holds (what --cache-ram "
        "counts).\n"
        "# TYPE turbospark_prefix_cache_bytes gauge\nturbospark_prefix_cache_bytes %llu\n"
        "# HELP turbospark_prefix_cache_entries Snapshots the prefix cache holds, both tiers.\n"
        "# TYPE turbospark_prefix_cache_entries gauge\nturbospark_prefix_cache_entries %llu\n",
        (unsigned long long)c->host_bytes, (unsigned long long)c->entries);
    rc |= appendf(
        out,
        "# HELP turbospark_prefix_cache_tier_bytes Bytes the prefix cache holds by tier: gpu (snapshots' "
        "states in GPU memory, what --cache-gpu counts), host (what --cache-ram counts).\n"
        "# TYPE turbospark_prefix_cache_tier_bytes gauge\n"
        "turbospark_prefix_cache_tier_bytes{tier=\"gpu\"} %llu\n"
        "turbospark_prefix_cache_tier_bytes{tier=\"host\"} %llu\n"
        "# HELP turbospark_prefix_cache_tier_entries Snapshots by where their state is: gpu or host memory.\n"
        "# TYPE turbospark_prefix_cache_tier_entries gauge\n"
        "turbospark_prefix_cache_tier_entries{tier=\"gpu\"} %llu\n"
        "turbospark_prefix_cache_tier_entries{tier=\"host\"} %llu\n"
        "# HELP turbospark_prefix_cache_tier_hits_total Restores of a cached prefix by where the snapshot's "
        "state was: gpu or host memory.\n"
        "# TYPE turbospark_prefix_cache_tier_hits_total counter\n"
        "turbospark_prefix_cache_tier_hits_total{tier=\"gpu\"} %llu\n"
        "turbospark_prefix_cache_tier_hits_total{tier=\"host\"} %llu\n",
        (unsigned long long)c->gpu_bytes, (unsigned long long)c->host_bytes,
        (unsigned long long)c->gpu_entries, (unsigned long long)(c->entries - c->gpu_entries),
        (unsigned long long)m->cache.gpu_hits, (unsigned long long)(m->cache.hits - m->cache.gpu_hits));
    rc |= histogram(out, "turbospark_request_duration_seconds",
                    "Completion time from arrival to the last token (finished requests).", m->lat_count,
                    m->lat_sum, m->lat_n);
    rc |= histogram(out, "turbospark_time_to_first_token_seconds", "Time from arrival to the first token.",
                    m->ttft_count, m->ttft_sum, m->ttft_n);
    pthread_mutex_unlock(&m->mu);
    return rc ? -1 : 0;
}
