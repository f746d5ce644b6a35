/* HTTP front end of turbospark serve (see server.h): routing, authentication, limits, the OpenAI
 * endpoints over the scheduler, server-sent events, and the process's life cycle. */
#include "server/server.h"

#include "server/guard.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/sched.h"
#include "turbospark.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_MS 100 /* how often a waiting connection looks at its socket */

typedef struct server {
    const ts_server_opts *o;
    ts_model *m;
    const ts_tokenizer *tok; /* the model's */
    ts_sched *sched;
    ts_metrics mt;
    ts_sampler_params defaults;
    bool chat_ok;
    ts_chat *chat; /* the chat template (NULL when chat_ok is false) */
    char chat_err[512];
    char model_name[256];
    long long created;
    int64_t n_ctx;
    size_t max_values;       /* JSON values a request body may hold (openai.h) */
    size_t max_prompt_bytes; /* prompt text that cannot fit n_ctx tokens, whatever it is */
    ts_guard *guard;
    atomic_int in_flight;
    atomic_bool draining;
    struct MHD_Daemon *d;
} server;

typedef struct route route;

/* What one choice's output has been turned into so far (chat: reasoning split, tool calls). */
typedef struct choice_out {
    ts_think_split think;
    ts_toolcall_parser tc;
    char (*call_ids)[32]; /* ids of the calls sent so far */
    int calls_sent;
    size_t have, lp_have; /* text bytes and log-probabilities taken from the job */
    int64_t text_offset;  /* completions: bytes of the tokens whose log-probabilities were sent */
    bool sent_finish;     /* streaming: the choice's finish chunk is out */
} choice_out;

typedef struct req {
    server *S;
    struct MHD_Connection *conn;
    const route *rt;
    char method[16], path[160];
    double t0;
    ts_conn *gc;      /* the connection's guard record (guard.h), or NULL */
    bool head_done;   /* the whole request head was received */
    const char *acao; /* Access-Control-Allow-Origin to send (--cors), or NULL */
    ts_text body;
    size_t discarded; /* body bytes dropped past the limit */
    bool responded;   /* a response is queued */
    unsigned status;
    /* a generation */
    ts_job *job;
    ts_api_resp resp;
    bool stream, include_usage;
    int64_t n_prompt, n_cached, n_gen;
    const char *outcome; /* finish reason, or what happened */
    /* streaming */
    ts_text pend, delta;
    size_t pend_off;
    uint64_t seen; /* the job's version last looked at */
    bool sent_role, over;
    /* chat output: the reasoning split off, tool calls parsed (chat_out), per choice */
    bool split_think, parse_tools, parallel_calls;
    choice_out *co;
    int n_co;
    ts_text out_r, out_c, mid; /* this piece's reasoning, content, and content before the tool parser */
    double mask_s;             /* seconds the grammar masks took (the log line) */
} req;

struct route {
    const char *path;
    const char *method;
    bool auth;
    enum MHD_Result (*handle)(req *q);
};

/* ---- small helpers -------------------------------------------------------------------------- */

/* Headers every response of ours carries: CORS for an allowed origin (--cors), and nothing a
 * browser could take as leave to sniff the type. */
static void common_headers(const req *q, struct MHD_Response *r) {
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (q->acao) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", q->acao);
        MHD_add_response_header(r, "Vary", "Origin");
    }
}

static enum MHD_Result queue(req *q, unsigned status, const char *ctype, const char *body, size_t n,
                             const char *h1, const char *v1) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    if (ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    common_headers(q, r);
    if (h1) MHD_add_response_header(r, h1, v1);
    enum MHD_Result rc = MHD_queue_response(q->conn, status, r);
    MHD_destroy_response(r);
    q->responded = true;
    q->status = status;
    return rc;
}

static enum MHD_Result queue_json(req *q, unsigned status, const ts_text *t, const char *h1, const char *v1) {
    return queue(q, status, "application/json", t->s ? t->s : "", t->n, h1, v1);
}

static enum MHD_Result send_error(req *q, const ts_api_error *e, const char *h1, const char *v1) {
    ts_text t = {0};
    if (ts_api_error_json(e, &t)) return MHD_NO;
    enum MHD_Result rc = queue_json(q, (unsigned)e->status, &t, h1, v1);
    ts_text_free(&t);
    if (!q->outcome) q->outcome = e->code ? e->code : e->type;
    return rc;
}

#define FAIL(q, status, type, code, param, ...)                                                              \
    do {                                                                                                     \
        ts_api_error e_;                                                                                     \
        ts_api_fail(&e_, status, type, code, param, __VA_ARGS__);                                            \
        return send_error(q, &e_, NULL, NULL);                                                               \
    } while (0)

static void random_bytes(void *buf, size_t n) {
    if (getrandom(buf, n, 0) == (ssize_t)n) return;
    uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)buf << 17) ^ (uint64_t)clock();
    for (size_t i = 0; i < n; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL,
        ((unsigned char *)buf)[i] = (unsigned char)(x >> 56);
}

/* Constant-time in the key: the loop runs over the configured key's length whatever is given. */
static bool key_matches(const char *given, const char *key) {
    size_t gn = strlen(given), kn = strlen(key);
    volatile unsigned char d = (unsigned char)(gn != kn);
    for (size_t i = 0; i < kn; i++) d |= (unsigned char)(key[i] ^ (i < gn ? given[i] : 0));
    return d == 0;
}

/* The client closed its end (or the socket failed) while we wait; nothing is read. */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if (p.revents & POLLIN) { /* bytes of a pipelined request, or an orderly close (0) */
        char b;
        ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

/* ---- GET endpoints -------------------------------------------------------------------------- */

static enum MHD_Result handle_health(req *q) {
    server *S = q->S;
    ts_metrics_gauges g = {0};
    ts_sched_gauges(S->sched, &g);
    char buf[256];
    bool draining = atomic_load(&S->draining);
    int n = snprintf(
        buf, sizeof buf, "{\"status\":\"%s\",\"slots_idle\":%d,\"slots_processing\":%d,\"queue\":%d}",
        draining ? "shutting down" : "ok", g.slots_total - g.slots_busy, g.slots_busy, g.queue_depth);
    return queue(q, draining ? 503 : 200, "application/json", buf, (size_t)n, NULL, NULL);
}

static int model_json(server *S, ts_text *t) {
    int rc = ts_text_append(t, "{\"id\":", 6); /* 6 bytes: {"id": */
    rc |= ts_json_string(t, S->model_name, strlen(S->model_name));
    char buf[384];
    int n = snprintf(
        buf, sizeof buf,
        ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"turbospark\",\"meta\":{\"n_ctx_slot\":%" PRId64
        ",\"n_slots\":%d,\"n_ctx_train\":%" PRId64 ",\"n_vocab\":%d,\"chat_template\":\"%s\"}}",
        S->created, S->n_ctx, S->o->n_slots, ts_model_n_ctx_train(S->m), (int)ts_model_n_vocab(S->m),
        S->chat_ok ? ts_chat_name(S->chat) : "none");
    rc |= ts_text_append(t, buf, (size_t)n);
    return rc;
}

static enum MHD_Result handle_models(req *q) {
    ts_text t = {0};
    static const char open[] = "{\"object\":\"list\",\"data\":[";
    int rc = ts_text_append(&t, open, sizeof open - 1);
    rc |= model_json(q->S, &t);
    rc |= ts_text_append(&t, "]}", 2);
    enum MHD_Result r = rc ? MHD_NO : queue_json(q, 200, &t, NULL, NULL);
    ts_text_free(&t);
    return r;
}

static enum MHD_Result handle_model(req *q) { /* GET /v1/models/{id} */
    const char *id = strrchr(q->path, '/') + 1;
    char clip[136];
    if (strcmp(id, q->S->model_name) != 0)
        FAIL(q, 404, "invalid_request_error", "model_not_found", "model",
             "the model '%s' does not exist here (this server has '%s')",
             ts_api_clip(id, 128, clip, sizeof clip), q->S->model_name);
    ts_text t = {0};
    enum MHD_Result r = model_json(q->S, &t) ? MHD_NO : queue_json(q, 200, &t, NULL, NULL);
    ts_text_free(&t);
    return r;
}

static enum MHD_Result handle_metrics(req *q) {
    server *S = q->S;
    ts_metrics_gauges g = {0};
    ts_sched_gauges(S->sched, &g);
    g.http_in_flight = atomic_load(&S->in_flight);
    ts_guard_counts(S->guard, g.conn_by_phase);
    ts_text t = {0};
    enum MHD_Result r =
        ts_metrics_render(&S->mt, &g, &t)
            ? MHD_NO
            : queue(q, 200, "text/plain; version=0.0.4; charset=utf-8", t.s ? t.s : "", t.n, NULL, NULL);
    ts_text_free(&t);
    return r;
}

/* GET /props, as llama-server has it: the context per slot, the slots, the model and its chat
 * template, and the default sampling. */
static enum MHD_Result handle_props(req *q) {
    server *S = q->S;
    const ts_sampler_params *d = &S->defaults;
    ts_text t = {0};
    char buf[640];
    int n = snprintf(
        buf, sizeof buf,
        "{\"default_generation_settings\":{\"n_ctx\":%" PRId64
        ",\"params\":{\"temperature\":%g,\"top_k\":%d,\"top_p\":%g,\"min_p\":%g,"
        "\"repeat_penalty\":%g,\"repeat_last_n\":%d,\"presence_penalty\":%g,"
        "\"frequency_penalty\":%g}},\"total_slots\":%d,\"n_ctx\":%" PRId64 ",\"n_ctx_train\":%" PRId64
        ",\"n_vocab\":%d,\"chat_template_name\":\"%s\",\"model_alias\":",
        S->n_ctx, d->temperature, d->top_k, d->top_p, d->min_p, d->repeat_penalty, d->penalty_last_n,
        d->presence_penalty, d->frequency_penalty, S->o->n_slots, S->n_ctx, ts_model_n_ctx_train(S->m),
        (int)ts_model_n_vocab(S->m), S->chat_ok ? ts_chat_name(S->chat) : "none");
    int rc = n < 0 || (size_t)n >= sizeof buf ? -1 : ts_text_append(&t, buf, (size_t)n);
    rc |= ts_json_string(&t, S->model_name, strlen(S->model_name));
    rc |= ts_text_append(&t, ",\"model_path\":", 14);
    rc |= ts_json_string(&t, S->o->model_path, strlen(S->o->model_path));
    rc |= ts_text_append(&t, ",\"chat_template\":", 17);
    const char *tpl = ts_tokenizer_chat_template(S->tok);
    if (tpl) {
        ts_text clean = {0};
        rc |= ts_utf8_sanitize(tpl, strlen(tpl), &clean) < 0;
        rc |= ts_json_string(&t, clean.s ? clean.s : "", clean.n);
        ts_text_free(&clean);
    } else {
        rc |= ts_text_append(&t, "\"\"", 2);
    }
    n = snprintf(buf, sizeof buf, ",\"build_info\":\"turbospark\",\"backend\":\"%s\"}",
                 S->o->backend == TS_BACKEND_CUDA ? "cuda" : "cpu");
    rc |= ts_text_append(&t, buf, (size_t)n);
    enum MHD_Result r = rc ? MHD_NO : queue_json(q, 200, &t, NULL, NULL);
    ts_text_free(&t);
    return r;
}

/* POST /tokenize (llama-server's): {"tokens": [ids]}, or with_pieces [{"id", "piece"}]. */
static enum MHD_Result handle_tokenize(req *q) {
    server *S = q->S;
    ts_api_tokenize r;
    ts_api_error e;
    if (ts_api_parse_tokenize(q->body.s ? q->body.s : "", q->body.n, S->max_values, &r, &e))
        return send_error(q, &e, NULL, NULL);
    ts_tokens ids = {0};
    ts_text t = {0};
    char err[512];
    int rc = 0;
    if (r.n_content > S->max_prompt_bytes) {
        free(r.content);
        FAIL(q, 400, "invalid_request_error", "context_length_exceeded", "content",
             "the content is %zu bytes, more than this server tokenizes at once (%zu)", r.n_content,
             S->max_prompt_bytes);
    }
    if (r.add_special && ts_tokenizer_add_bos(S->tok) && ts_tokenizer_bos(S->tok) >= 0)
        rc = ts_tokens_push(&ids, ts_tokenizer_bos(S->tok));
    if (rc || ts_tokenize(S->tok, r.content, r.n_content, r.parse_special, &ids, err, sizeof err)) {
        free(r.content);
        ts_tokens_free(&ids);
        FAIL(q, 400, "invalid_request_error", "invalid_value", "content", "%s", rc ? "out of memory" : err);
    }
    free(r.content);
    rc |= ts_text_append(&t, "{\"tokens\":[", 11);
    for (size_t i = 0; i < ids.n; i++) {
        char b[48];
        int k = snprintf(b, sizeof b, "%s%" PRId32, i ? "," : "", ids.ids[i]);
        if (r.with_pieces)
            k = snprintf(b, sizeof b, "%s{\"id\":%" PRId32 ",\"piece\":", i ? "," : "", ids.ids[i]);
        rc |= ts_text_append(&t, b, (size_t)k);
        if (r.with_pieces) {
            size_t L = 0;
            const char *p = ts_token_bytes(S->tok, ids.ids[i], true, &L);
            ts_text clean = {0};
            rc |= ts_utf8_sanitize(p ? p : "", p ? L : 0, &clean) < 0;
            rc |= ts_json_string(&t, clean.s ? clean.s : "", clean.n);
            rc |= ts_text_append(&t, "}", 1);
            ts_text_free(&clean);
        }
    }
    rc |= ts_text_append(&t, "]}", 2);
    ts_tokens_free(&ids);
    enum MHD_Result res = rc ? MHD_NO : queue_json(q, 200, &t, NULL, NULL);
    ts_text_free(&t);
    return res;
}

/* POST /detokenize (llama-server's): {"content": text} (special tokens written out; invalid UTF-8 of
 * a cut character becomes U+FFFD). */
static enum MHD_Result handle_detokenize(req *q) {
    server *S = q->S;
    ts_tokens ids;
    ts_api_error e;
    if (ts_api_parse_detokenize(q->body.s ? q->body.s : "", q->body.n, S->max_values, ts_model_n_vocab(S->m),
                                &ids, &e))
        return send_error(q, &e, NULL, NULL);
    ts_text raw = {0}, clean = {0}, t = {0};
    char err[256];
    int rc = ts_detokenize(S->tok, ids.ids, ids.n, true, &raw, err, sizeof err);
    ts_tokens_free(&ids);
    if (rc) {
        ts_text_free(&raw);
        FAIL(q, 400, "invalid_request_error", "invalid_value", "tokens", "%s", err);
    }
    rc |= ts_utf8_sanitize(raw.s ? raw.s : "", raw.n, &clean) < 0;
    rc |= ts_text_append(&t, "{\"content\":", 11);
    rc |= ts_json_string(&t, clean.s ? clean.s : "", clean.n);
    rc |= ts_text_append(&t, "}", 1);
    enum MHD_Result res = rc ? MHD_NO : queue_json(q, 200, &t, NULL, NULL);
    ts_text_free(&raw), ts_text_free(&clean), ts_text_free(&t);
    return res;
}

/* ---- slots (llama-server's GET /slots and POST /slots/{id}?action=...) ------------------------ */

/* GET /slots: [{"id", "n_ctx", "speculative", "is_processing", "n_prompt_tokens"}] (n_prompt_tokens:
 * the tokens the slot's state holds, which a prompt extending them skips); ?fail_on_no_slot=1
 * answers 503 when every slot is processing. */
static enum MHD_Result handle_slots(req *q) {
    server *S = q->S;
    const int n = S->o->n_slots;
    ts_slot_info *info = calloc((size_t)n, sizeof *info);
    if (!info) return MHD_NO;
    ts_sched_slots(S->sched, info);
    int idle = 0, rc = 0;
    ts_text t = {0};
    rc |= ts_text_append(&t, "[", 1);
    for (int i = 0; i < n; i++) {
        char buf[256];
        int k = snprintf(buf, sizeof buf,
                         "%s{\"id\":%d,\"n_ctx\":%" PRId64
                         ",\"speculative\":false,\"is_processing\":%s,\"n_prompt_tokens\":%" PRId64 "}",
                         i ? "," : "", i, S->n_ctx, info[i].processing ? "true" : "false", info[i].n_tokens);
        rc |= ts_text_append(&t, buf, (size_t)k);
        idle += !info[i].processing;
    }
    rc |= ts_text_append(&t, "]", 1);
    free(info);
    const char *fail = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    enum MHD_Result r;
    if (rc)
        r = MHD_NO;
    else if (fail && strcmp(fail, "0") && strcmp(fail, "false") && idle == 0) {
        ts_api_error e;
        ts_api_fail(&e, 503, "server_error", "no_slot_available", NULL, "no slot is idle (fail_on_no_slot)");
        r = send_error(q, &e, NULL, NULL);
    } else {
        r = queue_json(q, 200, &t, NULL, NULL);
    }
    ts_text_free(&t);
    return r;
}

/* POST /slots/{id}?action=save|restore|erase, as llama-server has it: a slot's state and tokens to
 * and from a file of --slot-save-path ({"filename"}), or the slot emptied. */
static enum MHD_Result handle_slot_action(req *q) {
    server *S = q->S;
    const char *dir = S->o->slot_save_path;
    if (!dir)
        FAIL(q, 501, "not_supported_error", "not_supported", NULL,
             "this server does not support slot actions: start it with --slot-save-path DIR");
    const char *ids = q->path + strlen("/slots/");
    char clip[72];
    long id = -1;
    if (strspn(ids, "0123456789") == strlen(ids) && strlen(ids) <= 9) id = strtol(ids, NULL, 10);
    if (id < 0 || id >= S->o->n_slots)
        FAIL(q, 400, "invalid_request_error", "invalid_value", "id_slot",
             "invalid slot id '%s': this server has slots 0 to %d (serve -np)",
             ts_api_clip(ids, 64, clip, sizeof clip), S->o->n_slots - 1);
    const char *action = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "action");
    if (!action)
        FAIL(q, 400, "invalid_request_error", "missing_required_parameter", "action",
             "the query parameter 'action' is required: save, restore or erase");
    const bool save = !strcmp(action, "save"), restore = !strcmp(action, "restore"),
               erase = !strcmp(action, "erase");
    if (!save && !restore && !erase)
        FAIL(q, 400, "invalid_request_error", "invalid_value", "action",
             "invalid action '%s': use save, restore or erase", ts_api_clip(action, 64, clip, sizeof clip));
    char *name = NULL, err[768];
    ts_api_error e;
    if (!erase && ts_api_parse_slot_file(q->body.s ? q->body.s : "", q->body.n, S->max_values, &name, &e))
        return send_error(q, &e, NULL, NULL);
    ts_slot_result r;
    ts_slot_status st = save      ? ts_sched_slot_save(S->sched, (int)id, dir, name, &r, err, sizeof err)
                        : restore ? ts_sched_slot_restore(S->sched, (int)id, dir, name, &r, err, sizeof err)
                                  : ts_sched_slot_erase(S->sched, (int)id, &r, err, sizeof err);
    ts_text t = {0};
    int rc = 0;
    if (st == TS_SLOT_OK) {
        char buf[256];
        int k = snprintf(buf, sizeof buf, "{\"id_slot\":%ld", id);
        rc |= ts_text_append(&t, buf, (size_t)k);
        if (!erase) {
            rc |= ts_text_append(&t, ",\"filename\":", 12);
            rc |= ts_json_string(&t, name, strlen(name));
        }
        k = save      ? snprintf(buf, sizeof buf,
                                 ",\"n_saved\":%" PRId64 ",\"n_written\":%" PRIu64
                                 ",\"timings\":{\"save_ms\":%.3f}}",
                                 r.n_tokens, r.n_bytes, r.ms)
            : restore ? snprintf(buf, sizeof buf,
                                 ",\"n_restored\":%" PRId64 ",\"n_read\":%" PRIu64
                                 ",\"timings\":{\"restore_ms\":%.3f}}",
                                 r.n_tokens, r.n_bytes, r.ms)
                      : snprintf(buf, sizeof buf, ",\"n_erased\":%" PRId64 "}", r.n_tokens);
        rc |= ts_text_append(&t, buf, (size_t)k);
    } else if (st == TS_SLOT_BUSY) {
        ts_api_fail(&e, 409, "invalid_request_error", "slot_busy", "id_slot", "%s", err);
    } else if (st == TS_SLOT_MISSING) {
        ts_api_fail(&e, 404, "invalid_request_error", "file_not_found", "filename", "%s", err);
    } else if (st == TS_SLOT_BAD_FILE) {
        ts_api_fail(&e, 400, "invalid_request_error", "invalid_slot_file", "filename", "%s", err);
    } else {
        ts_api_fail(&e, st == TS_SLOT_NO_SUCH ? 400 : 500,
                    st == TS_SLOT_NO_SUCH ? "invalid_request_error" : "server_error",
                    st == TS_SLOT_NO_SUCH ? "invalid_value" : "slot_action_failed", NULL, "%s", err);
    }
    if (st == TS_SLOT_OK) q->outcome = save ? "save" : restore ? "restore" : "erase";
    free(name);
    enum MHD_Result res = st != TS_SLOT_OK ? send_error(q, &e, NULL, NULL)
                          : rc             ? MHD_NO
                                           : queue_json(q, 200, &t, NULL, NULL);
    ts_text_free(&t);
    return res;
}

/* ---- completions ---------------------------------------------------------------------------- */

static const char *finish_str(ts_finish f) {
    return f == TS_FINISH_LENGTH ? "length" : "stop";
}

static void usage_of(const ts_job_state *st, ts_api_usage *u) {
    u->prompt_tokens = st->n_prompt, u->completion_tokens = st->n_gen, u->cached_tokens = st->n_cached;
}

/* The error a finished-but-failed job gets (500 engine failure, 503 shutdown). */
static void job_error(const ts_job_state *st, ts_api_error *e) {
    if (st->finish == TS_FINISH_SHUTDOWN)
        ts_api_fail(e, 503, "server_error", "shutting_down", NULL,
                    "the server is shutting down; the request was not finished");
    else
        ts_api_fail(e, 500, "server_error", "engine_error", NULL, "%s",
                    st->error[0] ? st->error : "the engine failed");
}

static void note_job(req *q, const ts_job_state *st) {
    q->n_prompt = st->n_prompt, q->n_cached = st->n_cached, q->n_gen = st->n_gen;
    q->outcome = st->finish == TS_FINISH_STOP || st->finish == TS_FINISH_LENGTH ? finish_str(st->finish)
                                                                                : ts_finish_name(st->finish);
}

/* Generated text through the reasoning split and the tool-call parser (chat only); out_r and
 * out_c get this piece's decided reasoning and content. final: the text is over. */
static int chat_out(req *q, choice_out *co, const char *s, size_t n, bool final) {
    q->out_r.n = q->out_c.n = q->mid.n = 0;
    int rc = 0;
    if (q->resp.kind != TS_API_CHAT) return ts_text_append(&q->out_c, s, n);
    if (q->split_think) {
        rc |= ts_think_push(&co->think, s, n, &q->out_r, &q->mid);
        if (final) rc |= ts_think_finish(&co->think, &q->out_r, &q->mid);
    } else {
        rc |= ts_text_append(&q->mid, s, n);
    }
    if (q->parse_tools) {
        rc |= ts_toolcall_push(&co->tc, q->mid.s, q->mid.n, &q->out_c);
        if (final) rc |= ts_toolcall_finish(&co->tc, &q->out_c);
    } else {
        rc |= ts_text_append(&q->out_c, q->mid.s, q->mid.n);
    }
    return rc ? -1 : 0;
}

/* Calls parsed and not sent yet, with new ids (one call only when parallel calls are off). */
static int new_calls(req *q, choice_out *co, ts_api_call *buf, int max) {
    int total = q->parallel_calls || co->tc.n_calls < 1 ? co->tc.n_calls : 1, k = 0;
    if (total > co->calls_sent) {
        char(*ids)[32] = realloc(co->call_ids, (size_t)total * sizeof *ids);
        if (!ids) return -1;
        co->call_ids = ids;
    }
    for (int i = co->calls_sent; i < total && k < max; i++, k++) {
        unsigned char rnd[12];
        random_bytes(rnd, sizeof rnd);
        int w = snprintf(co->call_ids[i], sizeof co->call_ids[i], "call_");
        for (size_t b = 0; b < sizeof rnd; b++)
            w += snprintf(co->call_ids[i] + w, sizeof co->call_ids[i] - (size_t)w, "%02x", rnd[b]);
        buf[k] = (ts_api_call){co->call_ids[i], co->tc.calls[i].name, co->tc.calls[i].arguments};
    }
    return k;
}

/* A delta of this piece: reasoning, content and the new calls (buf holds them). */
static int piece_delta(req *q, choice_out *co, ts_api_delta *d, ts_api_call *buf, int max) {
    int first = co->calls_sent, k = new_calls(q, co, buf, max);
    if (k < 0) return -1;
    co->calls_sent += k;
    *d = (ts_api_delta){.index = (int)(co - q->co),
                        .content = q->out_c.s,
                        .n_content = q->out_c.n,
                        .reasoning = q->out_r.s,
                        .n_reasoning = q->out_r.n,
                        .calls = buf,
                        .n_calls = k,
                        .first_index = first};
    return 0;
}

static const char *finish_of(const choice_out *co, ts_finish f) {
    return f == TS_FINISH_LENGTH ? "length" : co->calls_sent ? "tool_calls" : "stop";
}

static bool finish_ok(ts_finish f) {
    return f == TS_FINISH_STOP || f == TS_FINISH_LENGTH;
}

/* Every choice ended with stop or length. */
static bool all_ok(const ts_job_state *st) {
    for (int c = 0; c < st->n_choices; c++)
        if (!finish_ok(st->ch[c].finish)) return false;
    return st->done && st->n_choices > 0;
}

static bool any_calls(const req *q) {
    for (int c = 0; c < q->n_co; c++)
        if (q->co[c].calls_sent) return true;
    return false;
}

/* Bytes of the tokens of lp[0 .. n) (completions' text_offset). */
static int64_t lp_bytes(const req *q, const ts_token_logprobs *lp, size_t n) {
    int64_t b = 0;
    for (size_t i = 0; i < n; i++) {
        size_t L = 0;
        ts_token_bytes(q->S->tok, lp[i].id, true, &L);
        b += (int64_t)L;
    }
    return b;
}

/* Streaming: the chunks of choice c's new text and log-probabilities, and its finish chunk once it
 * is over. 0, or −1 when out of memory. */
static int stream_choice(req *q, int c, const ts_job_state *st) {
    choice_out *co = &q->co[c];
    if (co->sent_finish) return 0;
    bool ok_end = st->ch[c].done && finish_ok(st->ch[c].finish);
    ts_token_logprobs *lp = NULL;
    size_t n_lp = 0;
    q->delta.n = 0;
    if (ts_job_read(q->job, c, co->have, &q->delta, co->lp_have, q->resp.logprobs >= 0 ? &lp : NULL, &n_lp))
        return -1;
    int rc = 0;
    if (q->delta.n || n_lp || ok_end) {
        co->have += q->delta.n, co->lp_have += n_lp;
        ts_api_call calls[8];
        ts_api_delta d;
        for (bool first = true;; first = false) { /* more than 8 new calls: several chunks */
            if ((first && chat_out(q, co, q->delta.s, q->delta.n, ok_end)) ||
                piece_delta(q, co, &d, calls, 8)) {
                rc = -1;
                break;
            }
            if (!first) d.n_content = d.n_reasoning = 0;
            if (first) d.lp = lp, d.n_lp = n_lp, d.text_offset = co->text_offset;
            if ((d.n_content || d.n_reasoning || d.n_calls || d.n_lp) &&
                ts_api_chunk_sse(&q->resp, false, &d, NULL, NULL, &q->pend)) {
                rc = -1;
                break;
            }
            if (d.n_calls < 8) break;
        }
        co->text_offset += lp_bytes(q, lp, n_lp);
    }
    free(lp);
    if (!rc && ok_end) {
        rc = ts_api_chunk_sse_at(&q->resp, c, false, finish_of(co, st->ch[c].finish), &q->pend);
        co->sent_finish = true;
    }
    return rc;
}

/* Server-sent events: MHD asks for bytes; we block (in this connection's own thread) until the
 * scheduler publishes text, watching the socket meanwhile. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    req *q = cls;
    (void)pos;
    for (;;) {
        if (q->pend_off < q->pend.n) {
            size_t k = q->pend.n - q->pend_off < max ? q->pend.n - q->pend_off : max;
            memcpy(buf, q->pend.s + q->pend_off, k);
            q->pend_off += k;
            return (ssize_t)k;
        }
        q->pend.n = q->pend_off = 0;
        if (q->over) return MHD_CONTENT_READER_END_OF_STREAM;
        if (q->resp.kind == TS_API_CHAT && !q->sent_role) {
            q->sent_role = true;
            for (int c = 0; c < q->n_co; c++)
                if (ts_api_chunk_sse_at(&q->resp, c, true, NULL, &q->pend))
                    return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        ts_job_state st;
        ts_job_wait(q->job, q->seen, WAIT_SLICE_MS, &st);
        q->seen = st.version;
        for (int c = 0; c < q->n_co; c++)
            if (stream_choice(q, c, &st)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st.done) {
            note_job(q, &st);
            int rc = 0;
            if (st.finish == TS_FINISH_CANCELLED) return MHD_CONTENT_READER_END_WITH_ERROR;
            if (all_ok(&st)) {
                if (any_calls(q)) q->outcome = "tool_calls";
                if (q->include_usage) {
                    ts_api_usage u;
                    usage_of(&st, &u);
                    rc |= ts_api_chunk_sse(&q->resp, false, NULL, NULL, &u, &q->pend);
                }
            } else {
                ts_api_error e;
                job_error(&st, &e);
                rc |= ts_text_append(&q->pend, "data: ", 6);
                rc |= ts_api_error_json(&e, &q->pend);
                rc |= ts_text_append(&q->pend, "\n\n", 2);
            }
            rc |= ts_text_append(&q->pend, "data: [DONE]\n\n", 14);
            if (rc) return MHD_CONTENT_READER_END_WITH_ERROR;
            q->over = true;
            continue;
        }
        if (client_gone(q->conn)) {
            ts_job_cancel(q->job);
            q->outcome = "client gone";
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* Waits for a whole (non-streamed) completion and answers it. */
static enum MHD_Result finish_blocking(req *q) {
    ts_job_state st;
    for (;;) {
        ts_job_wait(q->job, q->seen, WAIT_SLICE_MS, &st);
        q->seen = st.version;
        if (st.done) break;
        if (client_gone(q->conn)) {
            ts_job_cancel(q->job);
            q->outcome = "client gone";
            return MHD_NO; /* closes the connection */
        }
    }
    note_job(q, &st);
    if (st.finish == TS_FINISH_CANCELLED) return MHD_NO;
    if (!all_ok(&st)) {
        ts_api_error e;
        job_error(&st, &e);
        return send_error(q, &e, NULL, NULL);
    }
    const int n = q->n_co;
    ts_api_usage u;
    usage_of(&st, &u);
    ts_text out = {0}, text = {0};
    ts_api_delta *d = calloc((size_t)n, sizeof *d);
    ts_text *keep = calloc(2 * (size_t)n, sizeof *keep); /* each choice's content and reasoning */
    ts_api_call **calls = calloc((size_t)n, sizeof *calls);
    ts_token_logprobs **lp = calloc((size_t)n, sizeof *lp);
    const char **fin = calloc((size_t)n, sizeof *fin);
    bool bad = !d || !keep || !calls || !lp || !fin;
    for (int c = 0; c < n && !bad; c++) {
        choice_out *co = &q->co[c];
        size_t n_lp = 0;
        text.n = 0;
        bad = ts_job_read(q->job, c, 0, &text, 0, q->resp.logprobs >= 0 ? &lp[c] : NULL, &n_lp) ||
              chat_out(q, co, text.s, text.n, true) != 0;
        if (bad) break;
        int k = co->tc.n_calls ? co->tc.n_calls : 1;
        bad = !(calls[c] = malloc((size_t)k * sizeof **calls)) || piece_delta(q, co, &d[c], calls[c], k) ||
              ts_text_append(&keep[2 * c], q->out_c.s ? q->out_c.s : "", q->out_c.n) ||
              ts_text_append(&keep[2 * c + 1], q->out_r.s ? q->out_r.s : "", q->out_r.n);
        d[c].content = keep[2 * c].s, d[c].reasoning = keep[2 * c + 1].s;
        d[c].lp = lp[c], d[c].n_lp = n_lp;
        fin[c] = finish_of(co, st.ch[c].finish);
    }
    if (!bad && any_calls(q)) q->outcome = "tool_calls";
    enum MHD_Result rc = bad || ts_api_response_json(&q->resp, d, fin, n, &u, &out)
                             ? MHD_NO
                             : queue_json(q, 200, &out, NULL, NULL);
    for (int c = 0; c < n; c++) {
        if (keep) ts_text_free(&keep[2 * c]), ts_text_free(&keep[2 * c + 1]);
        if (calls) free(calls[c]);
        if (lp) free(lp[c]);
    }
    free(d), free(keep), free(calls), free(lp), free(fin);
    ts_text_free(&out), ts_text_free(&text);
    return rc;
}

/* The prompt of a chat request, rendered with the server's chat template. 0, or −1 with e filled. */
static int render_chat(server *S, const ts_api_request *r, ts_text *prompt, ts_api_error *e) {
    if (!S->chat_ok) {
        ts_api_fail(e, 500, "server_error", "chat_template_unsupported", NULL,
                    "this server cannot render the model's chat template (%s); use /v1/completions or "
                    "restart with --chat-template",
                    S->chat_err);
        return -1;
    }
    bool tools_on = r->n_tools && r->tool_choice != TS_TOOLS_NONE;
    char err[512];
    if (ts_chat_apply(S->chat, r->messages_json, tools_on ? r->tools_json : NULL, r->template_kwargs,
                      r->add_generation_prompt, &prompt->s, &prompt->n, err, sizeof err)) {
        ts_text_free(prompt);
        ts_api_fail(e, 400, "invalid_request_error", "invalid_value", "messages", "%s", err);
        return -1;
    }
    prompt->cap = prompt->n + 1; /* ts_chat_apply's text is NUL-terminated */
    if (prompt->n > S->max_prompt_bytes) {
        ts_text_free(prompt);
        ts_api_fail(e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                    "this model's context is %" PRId64 " tokens per request; the messages are %zu bytes, "
                    "more than any %" PRId64 " tokens can hold",
                    S->n_ctx, prompt->n, S->n_ctx);
        return -1;
    }
    return 0;
}

/* POST /apply-template (llama-server's): a chat request's prompt as the template renders it,
 * {"prompt": text}, without generating. */
static enum MHD_Result handle_apply_template(req *q) {
    server *S = q->S;
    ts_api_request r;
    ts_api_error e;
    if (ts_api_parse(TS_API_CHAT, q->body.s ? q->body.s : "", q->body.n, &S->defaults, S->max_values, &r, &e))
        return send_error(q, &e, NULL, NULL);
    ts_text prompt = {0}, t = {0};
    if (render_chat(S, &r, &prompt, &e)) {
        ts_api_request_free(&r);
        return send_error(q, &e, NULL, NULL);
    }
    ts_api_request_free(&r);
    ts_text clean = {0};
    int rc = ts_utf8_sanitize(prompt.s ? prompt.s : "", prompt.n, &clean) < 0;
    rc |= ts_text_append(&t, "{\"prompt\":", 10);
    rc |= ts_json_string(&t, clean.s ? clean.s : "", clean.n);
    rc |= ts_text_append(&t, "}", 1);
    ts_text_free(&clean), ts_text_free(&prompt);
    enum MHD_Result res = rc ? MHD_NO : queue_json(q, 200, &t, NULL, NULL);
    ts_text_free(&t);
    return res;
}

static enum MHD_Result handle_generate(req *q, ts_api_kind kind) {
    server *S = q->S;
    ts_api_request r;
    ts_api_error e;
    if (ts_api_parse(kind, q->body.s ? q->body.s : "", q->body.n, &S->defaults, S->max_values, &r, &e))
        return send_error(q, &e, NULL, NULL);
    ts_tokens ids = {0};
    char err[512];
    enum MHD_Result rc;
    ts_grammar *grammar = NULL;
    bool think_open = false;
    const char *param = kind == TS_API_CHAT ? "messages" : "prompt";
    if (kind == TS_API_CHAT) {
        ts_text prompt = {0};
        bool tools_on = r.n_tools && r.tool_choice != TS_TOOLS_NONE;
        if (render_chat(S, &r, &prompt, &e)) goto refuse;
        int bad = ts_tokenize(S->tok, prompt.s ? prompt.s : "", prompt.n, true, &ids, err, sizeof err);
        think_open = !bad && ts_prompt_opens_think(prompt.s ? prompt.s : "", prompt.n);
        ts_text_free(&prompt);
        if (bad) {
            ts_api_fail(&e, 400, "invalid_request_error", "invalid_value", "messages", "%s", err);
            goto refuse;
        }
        q->split_think = S->o->reasoning_format == TS_REASONING_DEEPSEEK;
        q->parse_tools = tools_on;
        q->parallel_calls = r.parallel_tool_calls;
        if (!(q->co = calloc((size_t)r.n_choices, sizeof *q->co))) {
            ts_api_fail(&e, 500, "server_error", "out_of_memory", NULL, "out of memory");
            goto refuse;
        }
        for (; q->n_co < r.n_choices; q->n_co++) {
            ts_think_init(&q->co[q->n_co].think, think_open);
            if (ts_toolcall_init(&q->co[q->n_co].tc, tools_on ? r.tools_json : NULL, err, sizeof err)) {
                ts_api_fail(&e, 400, "invalid_request_error", "invalid_value", "tools", "%s", err);
                goto refuse;
            }
        }
    } else if (r.prompt_is_ids) {
        ids = r.prompt_ids;
        r.prompt_ids = (ts_tokens){0};
        int32_t V = ts_model_n_vocab(S->m);
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] >= V) {
                ts_api_fail(&e, 400, "invalid_request_error", "invalid_value", "prompt",
                            "token id %" PRId32 " at prompt[%zu] is outside the vocabulary (0..%" PRId32 ")",
                            ids.ids[i], i, V - 1);
                goto refuse;
            }
    } else if (r.prompt_len > S->max_prompt_bytes) {
        ts_api_fail(&e, 400, "invalid_request_error", "context_length_exceeded", "prompt",
                    "this model's context is %" PRId64
                    " tokens per request; the prompt is %zu bytes, more than "
                    "any %" PRId64 " tokens can hold",
                    S->n_ctx, r.prompt_len, S->n_ctx);
        goto refuse;
    } else if (ts_tokenize(S->tok, r.prompt, r.prompt_len, true, &ids, err, sizeof err)) {
        ts_api_fail(&e, 400, "invalid_request_error", "invalid_value", "prompt", "%s", err);
        goto refuse;
    }
    {
        int bad = 0;
        const char *gparam = r.grammar ? "grammar" : r.format ? "response_format" : "tool_choice";
        if (r.grammar)
            bad = ts_gbnf_grammar(r.grammar, strlen(r.grammar), &grammar, err, sizeof err);
        else if (r.format == TS_FORMAT_JSON_OBJECT)
            bad = ts_json_schema_grammar(NULL, &grammar, err, sizeof err);
        else if (r.format == TS_FORMAT_JSON_SCHEMA)
            bad = ts_json_schema_grammar(r.schema_json, &grammar, err, sizeof err);
        else if (r.tool_choice == TS_TOOLS_REQUIRED || r.tool_choice == TS_TOOLS_NAMED)
            bad = ts_tool_call_grammar(r.tools_json, r.tool_choice == TS_TOOLS_NAMED ? r.tool_name : NULL,
                                       r.parallel_tool_calls, &grammar, err, sizeof err);
        if (bad) {
            ts_api_fail(&e, 400, "invalid_request_error", r.grammar ? "invalid_grammar" : "invalid_schema",
                        gparam, "%s", err);
            goto refuse;
        }
    }
    if (ids.n == 0) {
        ts_api_fail(&e, 400, "invalid_request_error", "invalid_value", param, "the %s is empty (no tokens)",
                    param);
        goto refuse;
    }
    if ((int64_t)ids.n >= S->n_ctx) {
        ts_api_fail(&e, 400, "invalid_request_error", "context_length_exceeded", param,
                    "this model's context is %" PRId64
                    " tokens per request, but the %s has %zu tokens (at least one "
                    "token must be left to generate)",
                    S->n_ctx, param, ids.n);
        goto refuse;
    }
    int64_t max_tokens = r.max_tokens < 0 ? S->n_ctx - (int64_t)ids.n : r.max_tokens;
    if ((int64_t)ids.n + max_tokens > S->n_ctx) {
        const char *mt = "max_tokens";
        ts_api_fail(&e, 400, "invalid_request_error", "context_length_exceeded", mt,
                    "this model's context is %" PRId64
                    " tokens per request; you asked for %zu in the %s plus %" PRId64
                    " to generate; lower max_tokens to at most %" PRId64,
                    S->n_ctx, ids.n, param, max_tokens, S->n_ctx - (int64_t)ids.n);
        goto refuse;
    }
    if (r.n_choices > S->o->n_slots) {
        ts_api_fail(&e, 400, "invalid_request_error", "invalid_value", "n",
                    "n = %d choices need as many slots, and this server has %d (serve -np)", r.n_choices,
                    S->o->n_slots);
        goto refuse;
    }
    if (kind != TS_API_CHAT) {
        if (!(q->co = calloc((size_t)r.n_choices, sizeof *q->co))) {
            ts_api_fail(&e, 500, "server_error", "out_of_memory", NULL, "out of memory");
            goto refuse;
        }
        q->n_co = r.n_choices;
    }
    if (!r.seed_given) random_bytes(&r.sp.seed, sizeof r.sp.seed);
    ts_job_params jp = {.prompt = ids.ids,
                        .n_prompt = ids.n,
                        .sp = r.sp,
                        .n_stops = r.n_stops,
                        .max_tokens = max_tokens,
                        .ignore_eos = r.ignore_eos,
                        .cache_prompt = r.cache_prompt,
                        .grammar = grammar,
                        .think_open = think_open,
                        .think_budget = S->o->reasoning_budget,
                        .n_choices = r.n_choices,
                        .logprobs = r.logprobs};
    grammar = NULL; /* the scheduler's now, whatever happens */
    for (int i = 0; i < r.n_stops; i++) jp.stops[i] = r.stops[i];
    bool busy = false;
    q->job = ts_sched_submit(S->sched, &jp, &busy, err, sizeof err);
    if (!q->job) {
        if (busy && atomic_load(&S->draining))
            ts_api_fail(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        else if (busy)
            ts_api_fail(&e, 503, "server_error", "server_busy", NULL,
                        "the server is busy (%d requests are already waiting); retry later", S->o->max_queue);
        else
            ts_api_fail(&e, 400, "invalid_request_error", "invalid_value", NULL, "%s", err);
        ts_tokens_free(&ids);
        ts_api_request_free(&r);
        return send_error(q, &e, e.status == 503 ? "Retry-After" : NULL, "1");
    }
    q->n_prompt = (int64_t)ids.n;
    ts_tokens_free(&ids);
    q->resp.kind = kind;
    q->resp.created = (long long)time(NULL);
    q->resp.model = S->model_name;
    q->resp.logprobs = r.logprobs;
    q->resp.tok = S->tok;
    unsigned char rnd[12];
    random_bytes(rnd, sizeof rnd);
    int k = snprintf(q->resp.id, sizeof q->resp.id, "%s", kind == TS_API_CHAT ? "chatcmpl-" : "cmpl-");
    for (size_t i = 0; i < sizeof rnd; i++)
        k += snprintf(q->resp.id + k, sizeof q->resp.id - (size_t)k, "%02x", rnd[i]);
    q->stream = r.stream;
    q->include_usage = r.include_usage;
    ts_api_request_free(&r);
    if (!q->stream) return finish_blocking(q);

    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, q, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    common_headers(q, resp);
    rc = MHD_queue_response(q->conn, 200, resp);
    MHD_destroy_response(resp);
    q->responded = true;
    q->status = 200;
    return rc;

refuse:
    ts_grammar_free(grammar);
    ts_tokens_free(&ids);
    ts_api_request_free(&r);
    return send_error(q, &e, NULL, NULL);
}

static enum MHD_Result handle_chat(req *q) {
    return handle_generate(q, TS_API_CHAT);
}
static enum MHD_Result handle_completion(req *q) {
    return handle_generate(q, TS_API_COMPLETION);
}

/* ---- routing -------------------------------------------------------------------------------- */

static const route k_routes[] = {
    {"/health", "GET", false, handle_health},
    {"/v1/health", "GET", false, handle_health},
    {"/v1/models", "GET", true, handle_models},
    {"/models", "GET", true, handle_models},
    {"/v1/models/*", "GET", true, handle_model},
    {"/metrics", "GET", true, handle_metrics},
    {"/props", "GET", true, handle_props},
    {"/tokenize", "POST", true, handle_tokenize},
    {"/detokenize", "POST", true, handle_detokenize},
    {"/apply-template", "POST", true, handle_apply_template},
    {"/slots", "GET", true, handle_slots},
    {"/slots/*", "POST", true, handle_slot_action},
    {"/v1/chat/completions", "POST", true, handle_chat},
    {"/chat/completions", "POST", true, handle_chat},
    {"/v1/completions", "POST", true, handle_completion},
    {"/completions", "POST", true, handle_completion},
};

static const route *find_route(const char *url) {
    for (size_t i = 0; i < sizeof k_routes / sizeof *k_routes; i++) {
        const char *p = k_routes[i].path;
        size_t L = strlen(p);
        if (p[L - 1] == '*') {
            if (!strncmp(url, p, L - 1) && url[L - 1] && !strchr(url + L - 1, '/')) return &k_routes[i];
        } else if (!strcmp(url, p)) {
            return &k_routes[i];
        }
    }
    return NULL;
}

/* ---- browsers: Host, Origin, Content-Type ------------------------------------------------------ */

/* The host part of a Host header value ("name", "name:port", "[v6]:port"), in buf. */
static const char *host_name(const char *h, char *buf, size_t n) {
    size_t L;
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        L = e ? (size_t)(e - h - 1) : strlen(h + 1);
        h++;
    } else {
        const char *c = strchr(h, ':');
        L = c && !strchr(c + 1, ':') ? (size_t)(c - h) : strlen(h);
    }
    if (L >= n) L = n - 1;
    memcpy(buf, h, L);
    buf[L] = 0;
    return buf;
}

static bool is_loopback(const char *name) {
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, name, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, name, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    size_t n = strlen(name);
    return !strcasecmp(name, "localhost") || (n > 10 && !strcasecmp(name + n - 10, ".localhost"));
}

/* DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 sends Host:
 * evil.example. Only loopback names, the --host given and --allow-host values pass; when listening
 * on every address (0.0.0.0, ::) any IP address literal passes too (clients reaching us by address). */
static bool host_allowed(const server *S, const char *h) {
    if (!h) return true; /* HTTP/1.0 without Host: no browser sends that */
    char name[256];
    host_name(h, name, sizeof name);
    if (is_loopback(name) || !strcasecmp(name, S->o->host)) return true;
    for (int i = 0; i < S->o->n_allow_hosts; i++)
        if (!strcmp(S->o->allow_hosts[i], "*") || !strcasecmp(name, S->o->allow_hosts[i])) return true;
    bool wildcard = !strcmp(S->o->host, "0.0.0.0") || !strcmp(S->o->host, "::");
    unsigned char a[16];
    return wildcard && (inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1);
}

/* The --cors value that allows this Origin, or NULL. */
static const char *cors_match(const server *S, const char *origin) {
    for (int i = 0; origin && i < S->o->n_cors; i++)
        if (!strcmp(S->o->cors[i], "*") || !strcasecmp(S->o->cors[i], origin)) return origin;
    return NULL;
}

/* application/json, with or without parameters (charset=utf-8). */
static bool is_json_type(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ' || *ct == '\t') ct++;
    if (strncasecmp(ct, "application/json", 16) != 0) return false;
    ct += 16;
    while (*ct == ' ' || *ct == '\t') ct++;
    return *ct == 0 || *ct == ';';
}

/* ---- requests ---------------------------------------------------------------------------------- */

static ts_conn *guard_record(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static req *new_req(server *S, struct MHD_Connection *c) {
    req *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->S = S, q->conn = c, q->t0 = ts_now(), q->gc = guard_record(c);
    atomic_fetch_add(&S->in_flight, 1);
    ts_guard_phase(S->guard, q->gc, TS_CONN_HEADERS);
    return q;
}

/* The request line has arrived (libmicrohttpd's URI log callback): the request exists from here,
 * so that one libmicrohttpd refuses itself (a head too large, malformed HTTP) is still counted. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    return new_req(cls, c);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    server *S = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? ts_guard_open(S->guard, ci->connect_fd) : NULL;
    } else {
        ts_guard_close(S->guard, *socket_context);
        *socket_context = NULL;
    }
}

/* The whole head is here: everything that does not need the body is decided now. */
static enum MHD_Result on_head(req *q, const char *url, const char *method) {
    server *S = q->S;
    struct MHD_Connection *c = q->conn;
    char u[136], m[24];
    snprintf(q->method, sizeof q->method, "%s", method);
    snprintf(q->path, sizeof q->path, "%s", url);
    ts_api_clip(url, 128, u, sizeof u), ts_api_clip(method, 16, m, sizeof m);
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!host_allowed(S, host)) {
        char h[72];
        FAIL(q, 403, "invalid_request_error", "host_not_allowed", NULL,
             "the Host header '%s' names neither this machine nor --host; start the server with --allow-host "
             "NAME to accept it (a web page can reach a local server through a name it controls)",
             ts_api_clip(host, 64, h, sizeof h));
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    q->acao = cors_match(S, origin);
    if (q->acao && !strcmp(method, "OPTIONS")) { /* a CORS preflight (only with --cors) */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        common_headers(q, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        enum MHD_Result rc = MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        q->responded = true, q->status = 204, q->outcome = "preflight";
        return rc;
    }
    const route *rt = find_route(url);
    if (!rt)
        FAIL(q, 404, "invalid_request_error", "unknown_url", NULL,
             "unknown URL: %s %s (see GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET "
             "/health, GET /metrics, GET /props, POST /tokenize, POST /detokenize, GET /slots)",
             m, u);
    if (strcmp(method, rt->method) != 0) {
        ts_api_error e;
        ts_api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                    "%s is not allowed on %s; use %s", m, u, rt->method);
        return send_error(q, &e, MHD_HTTP_HEADER_ALLOW, rt->method);
    }
    q->rt = rt;
    bool post = strcmp(rt->method, "POST") == 0;
    if (post && origin && !q->acao) {
        char o[72];
        FAIL(q, 403, "invalid_request_error", "origin_not_allowed", NULL,
             "requests from the web origin '%s' are not allowed; start the server with --cors ORIGIN to "
             "allow it",
             ts_api_clip(origin, 64, o, sizeof o));
    }
    if (rt->auth && S->o->api_key) {
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const char *given = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : "";
        if (!key_matches(given, S->o->api_key)) {
            ts_api_error e;
            ts_api_fail(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                        h ? "incorrect API key provided"
                          : "no API key provided: send 'Authorization: Bearer KEY'");
            return send_error(q, &e, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        }
    }
    if (atomic_load(&S->draining) && post) {
        ts_api_error e;
        ts_api_fail(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        return send_error(q, &e, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (te && strcasecmp(te, "chunked") != 0) {
        char t[72];
        ts_api_error e;
        ts_api_fail(
            &e, 501, "invalid_request_error", "unsupported_transfer_encoding", NULL,
            "Transfer-Encoding '%s' is not supported: send the body as it is, with Content-Length, or "
            "'Transfer-Encoding: chunked'",
            ts_api_clip(te, 64, t, sizeof t));
        return send_error(q, &e, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    if (post &&
        !is_json_type(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE))) {
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        char t[72];
        FAIL(q, 415, "invalid_request_error", "unsupported_media_type", NULL,
             "the request body must be JSON sent with 'Content-Type: application/json' (got %s%s%s)",
             ct ? "'" : "", ct ? ts_api_clip(ct, 64, t, sizeof t) : "none", ct ? "'" : "");
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > S->o->max_body) {
        char t[32];
        FAIL(q, 413, "invalid_request_error", "request_too_large", NULL,
             "the request body (%s bytes) is larger than this server's limit of %zu bytes",
             ts_api_clip(cl, 20, t, sizeof t), S->o->max_body);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size,
                                  void **con_cls) {
    server *S = cls;
    req *q = *con_cls;
    (void)version;
    if (!q && !(q = *con_cls = new_req(S, c))) return MHD_NO;
    if (!q->head_done) {
        q->head_done = true;
        ts_guard_phase(S->guard, q->gc, TS_CONN_BODY);
        return on_head(q, url, method);
    }
    if (q->responded) { /* answered already (error on the headers): drop the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->discarded || q->body.n + n > S->o->max_body) { /* chunked body past the limit */
            q->discarded += n;
            return q->discarded > 4 * S->o->max_body + (1u << 20) ? MHD_NO : MHD_YES; /* hang up on a flood */
        }
        return ts_text_append(&q->body, upload, n) ? MHD_NO : MHD_YES;
    }
    ts_guard_phase(S->guard, q->gc, TS_CONN_ANSWER);
    if (q->discarded)
        FAIL(q, 413, "invalid_request_error", "request_too_large", NULL,
             "the request body is larger than this server's limit of %zu bytes", S->o->max_body);
    return q->rt->handle(q);
}

/* Why a request of ours got no response (for /metrics). */
static ts_unanswered unanswered_reason(const req *q, enum MHD_RequestTerminationCode toe) {
    if (ts_guard_closed(q->S->guard, q->gc)) return TS_UNANSWERED_CLOSED;
    if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED) return TS_UNANSWERED_TIMEOUT;
    if (toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN) return TS_UNANSWERED_SHUTDOWN;
    if (toe == MHD_REQUEST_TERMINATED_READ_ERROR || toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ||
        q->head_done)
        return TS_UNANSWERED_CLIENT_GONE;
    return TS_UNANSWERED_HTTP_ERROR; /* libmicrohttpd refused the head and answered itself */
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    server *S = cls;
    req *q = *con_cls;
    (void)c;
    if (!q) return;
    *con_cls = NULL;
    if (q->job) {
        ts_job_state st;
        ts_job_wait(q->job, 0, 0, &st); /* the counts, for the log line */
        q->n_cached = st.n_cached, q->n_gen = st.n_gen, q->mask_s = st.mask_seconds;
        ts_job_cancel(q->job); /* nothing when it is done */
        ts_job_release(q->job);
    }
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && q->job && !q->over && q->stream)
        q->outcome = "client gone";
    if (q->responded) {
        ts_metrics_http(&S->mt, q->status);
    } else {
        ts_unanswered why = unanswered_reason(q, toe);
        ts_metrics_unanswered(&S->mt, why);
        if (!q->outcome)
            q->outcome = why == TS_UNANSWERED_HTTP_ERROR ? "malformed HTTP (answered by libmicrohttpd)"
                         : why == TS_UNANSWERED_TIMEOUT  ? "timeout"
                         : why == TS_UNANSWERED_SHUTDOWN ? "shutdown"
                         : why == TS_UNANSWERED_CLOSED   ? "closed by the connection guard"
                                                         : "client gone";
    }
    ts_guard_phase(S->guard, q->gc, TS_CONN_WAIT);
    if (!S->o->quiet) {
        char addr[INET6_ADDRSTRLEN] = "?";
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof addr);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, sizeof addr);
        }
        char gen[160] = "", status[8] = "-";
        if (q->job)
            snprintf(gen, sizeof gen, " prompt=%" PRId64 " cached=%" PRId64 " gen=%" PRId64 "%s", q->n_prompt,
                     q->n_cached, q->n_gen, q->stream ? " stream" : "");
        if (q->job && q->mask_s > 0)
            snprintf(gen + strlen(gen), sizeof gen - strlen(gen), " grammar=%.1fms", q->mask_s * 1e3);
        if (q->responded) snprintf(status, sizeof status, "%u", q->status);
        ts_text line = {0}; /* the path is the client's bytes: sanitized, as JSON strings are */
        ts_utf8_sanitize(q->path[0] ? q->path : "?", strlen(q->path[0] ? q->path : "?"), &line);
        for (size_t i = 0; i < line.n; i++)
            if ((unsigned char)line.s[i] < 0x20 || line.s[i] == 0x7f) line.s[i] = '?';
        fprintf(stderr, "serve: %s %s %.*s %s %.3fs%s%s%s\n", addr, q->method[0] ? q->method : "?",
                (int)line.n, line.s ? line.s : "", status, ts_now() - q->t0, gen, q->outcome ? " " : "",
                q->outcome ? q->outcome : "");
        ts_text_free(&line);
    }
    ts_text_free(&q->body);
    ts_text_free(&q->pend);
    ts_text_free(&q->delta);
    for (int i = 0; i < q->n_co; i++) {
        ts_think_free(&q->co[i].think);
        ts_toolcall_free(&q->co[i].tc);
        free(q->co[i].call_ids);
    }
    free(q->co);
    ts_text_free(&q->out_r), ts_text_free(&q->out_c), ts_text_free(&q->mid);
    free(q);
    atomic_fetch_sub(&S->in_flight, 1);
}

/* ---- life cycle ----------------------------------------------------------------------------- */

void ts_server_default_opts(ts_server_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->n_slots = 4;
    o->n_ctx = 4096;
    o->chunk = 256;
    o->step_tokens = 512;
    o->max_queue = 256;
    o->max_connections = 512;
    o->max_per_ip = 128;
    o->max_parsing = 64;
    o->max_body = 8u << 20;
    o->idle_timeout = 60;
    o->header_timeout = 10;
    o->body_timeout = 60;
    o->drain_seconds = 30;
    o->cache_prompt = true;
    o->cache_ram = (size_t)1024 << 20;
    o->cache_every = 2048;
    o->reasoning_format = TS_REASONING_DEEPSEEK;
    o->reasoning_budget = -1;
    o->sp = ts_sampler_default_params();
}

static void model_name_of(const ts_server_opts *o, char *buf, size_t n) {
    if (o->alias) {
        snprintf(buf, n, "%s", o->alias);
        return;
    }
    const char *b = strrchr(o->model_path, '/');
    snprintf(buf, n, "%s", b ? b + 1 : o->model_path);
}

/* libmicrohttpd's own messages (bad HTTP from a client, a response cut short), one prefixed line each. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const server *S = cls;
    if (S->o->quiet) return;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    fprintf(stderr, "serve: http: %s\n", buf);
}

static struct MHD_Daemon *start_daemon(server *S, char *err, size_t errlen) {
    const ts_server_opts *o = S->o;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int g = getaddrinfo(o->host, port, &hints, &ai);
    if (g) return ts_errf(err, errlen, "cannot resolve --host %s: %s", o->host, gai_strerror(g)), NULL;
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* libmicrohttpd's own limit sits above ours by max_parsing, so that the guard (guard.h) can close
     * the oldest waiting connection for a new one (and the closed ones can wind down) rather than
     * libmicrohttpd refusing the new one */
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, S,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, S,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, S, MHD_OPTION_URI_LOG_CALLBACK, on_uri, S,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_connections + o->max_parsing),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->max_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)o->idle_timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d)
        return ts_errf(err, errlen, "cannot listen on %s:%d (%s)", o->host, o->port,
                       errno ? strerror(errno) : "address in use?"),
               NULL;
    return d;
}

int ts_serve(const ts_server_opts *o) {
    server S_, *S = &S_;
    memset(S, 0, sizeof *S);
    S->o = o;
    char err[1024];
    double t0 = ts_now();
    int status = 1;
    bool metrics_ok = false;
    if (o->slot_save_path) { /* llama-server wants an existing directory too */
        struct stat st;
        if (strlen(o->slot_save_path) > 3000) {
            ts_errf(err, sizeof err, "--slot-save-path is longer than 3000 bytes");
            goto fail;
        }
        errno = 0;
        if (stat(o->slot_save_path, &st) || !S_ISDIR(st.st_mode) || access(o->slot_save_path, W_OK | X_OK)) {
            ts_errf(err, sizeof err, "--slot-save-path %s is not a directory this process can write to (%s)",
                    o->slot_save_path, errno ? strerror(errno) : "not a directory");
            goto fail;
        }
    }
    if (ts_model_load(o->model_path, &S->m, err, sizeof err)) goto fail;
    if (ts_model_tokenizer(S->m, &S->tok, err, sizeof err)) goto fail;
    S->defaults = o->sp;
    ts_model_sampling(S->m, &S->defaults, o->sp_given);
    {
        char e2[512];
        ts_sampler *probe;
        if (ts_sampler_new(&S->defaults, 1, &probe, e2, sizeof e2)) {
            ts_errf(err, sizeof err, "sampling defaults: %s", e2);
            goto fail;
        }
        ts_sampler_free(probe);
    }
    char note[700];
    S->chat_ok = !ts_chat_new(S->tok, o->chat_template, o->chat_template_file, !o->no_jinja, &S->chat, note,
                              sizeof note, S->chat_err, sizeof S->chat_err);
    if (note[0]) fprintf(stderr, "serve: note: %s\n", note);
    if (!S->chat_ok && (o->chat_template || o->chat_template_file)) {
        ts_errf(err, sizeof err, "%s", S->chat_err);
        goto fail;
    }
    if (!S->chat_ok) fprintf(stderr, "serve: warning: /v1/chat/completions is off: %s\n", S->chat_err);
    S->n_ctx = o->n_ctx < ts_model_n_ctx_train(S->m) ? o->n_ctx : ts_model_n_ctx_train(S->m);
    /* memory per request: the body (--max-body), and a JSON tree of at most max_values values
     * (about 64 bytes each in cJSON) — 8 per token of context, enough for any request that fits */
    S->max_values = (size_t)S->n_ctx * 8 + 4096;
    if (S->max_values > (1u << 20)) S->max_values = 1u << 20;
    {
        size_t longest = 1; /* a prompt past n_ctx tokens of the longest piece (x4: NFC composes) can't fit */
        for (int32_t id = 0; id < ts_tokenizer_n_tokens(S->tok); id++) {
            size_t L = 0;
            if (ts_token_bytes(S->tok, id, true, &L) && L > longest) longest = L;
        }
        S->max_prompt_bytes = 4 * longest * (size_t)S->n_ctx;
    }
    model_name_of(o, S->model_name, sizeof S->model_name);
    S->created = (long long)time(NULL);
    if (ts_metrics_init(&S->mt)) {
        ts_errf(err, sizeof err, "cannot initialise the metrics");
        goto fail;
    }
    metrics_ok = true;

    /* Signals: blocked in every thread (the daemon's and the scheduler's inherit the mask) and
     * taken synchronously by this one. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ts_sched_params sp = {.n_slots = o->n_slots,
                          .n_ctx = S->n_ctx,
                          .chunk = o->chunk,
                          .step_tokens = o->step_tokens,
                          .max_queue = o->max_queue,
                          .threads = o->threads,
                          .cache_prompt = o->cache_prompt,
                          .cache_bytes = o->cache_prompt ? o->cache_ram : 0,
                          .cache_gpu_bytes = o->cache_gpu,
                          .cache_every = o->cache_every,
                          .backend = o->backend,
                          .random_weights = o->random_weights};
    if (sp.chunk > sp.n_ctx) sp.chunk = sp.n_ctx;
    if (sp.step_tokens < sp.chunk) sp.step_tokens = sp.chunk;
    if (ts_sched_new(S->m, S->tok, &sp, &S->mt, &S->sched, err, sizeof err)) goto fail;
    {
        /* a thread and two descriptors per connection (the guard keeps a dup of each socket) */
        struct rlimit rl;
        rlim_t want = 2 * (rlim_t)(o->max_connections + o->max_parsing) + 64;
        if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < want) {
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        ts_guard_params gp = {.header_timeout = o->header_timeout,
                              .body_timeout = o->body_timeout,
                              .idle_timeout = o->idle_timeout,
                              .max_parsing = o->max_parsing,
                              .max_connections = o->max_connections};
        if (ts_guard_new(&gp, &S->mt, &S->guard, err, sizeof err)) goto fail;
    }
    if (!(S->d = start_daemon(S, err, sizeof err))) goto fail;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? (int)di->port : o->port;
    bool v6 = strchr(o->host, ':') != NULL;
    fprintf(stderr,
            "serve: model %s ('%s', chat template %s) loaded in %.2f s; %d slots x %" PRId64
            " tokens (%.1f MiB of state); "
            "sampling defaults: temp %.2f top-k %d top-p %.2f min-p %.2f%s\n",
            o->model_path, S->model_name, S->chat_ok ? ts_chat_name(S->chat) : "none", ts_now() - t0,
            o->n_slots, S->n_ctx, ts_sched_state_bytes(S->sched) / 1048576.0, S->defaults.temperature,
            S->defaults.top_k, S->defaults.top_p, S->defaults.min_p, o->api_key ? "; API key required" : "");
    if (o->cache_gpu)
        fprintf(stderr,
                "serve: the prefix cache keeps snapshots in %.0f MiB of GPU memory, then in %.0f MiB of host "
                "memory\n",
                o->cache_gpu / 1048576.0, o->cache_ram / 1048576.0);
    if (o->slot_save_path)
        fprintf(stderr, "serve: slots are saved to and restored from %s (POST /slots/{id}?action=...)\n",
                o->slot_save_path);
    fprintf(stderr, "serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", o->host, v6 ? "]" : "", port);
    bool loopback = !strcmp(o->host, "127.0.0.1") || !strcmp(o->host, "::1") ||
                    !strcmp(o->host, "localhost") || !strncmp(o->host, "127.", 4);
    if (!loopback && !o->api_key)
        fprintf(stderr,
                "serve: warning: listening beyond this machine without --api-key: anyone who can reach "
                "the port can use the model\n");
    fflush(stderr);

    int sig;
    while (sigwait(&sigs, &sig) != 0) {
    }
    fprintf(stderr,
            "serve: %s: no new connections; finishing the running requests (up to %.0f s; a second signal "
            "cancels them)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", o->drain_seconds);
    atomic_store(&S->draining, true);
    int lfd = MHD_quiesce_daemon(S->d);
    if (lfd >= 0) close(lfd);
    double deadline = ts_now() + o->drain_seconds;
    ts_sched_drain(S->sched, deadline);
    ts_guard_close_idle(S->guard); /* connections not being answered: nothing to finish */
    struct timespec zero = {0, 0};
    while (!ts_sched_wait_idle(S->sched, 100)) {
        if (sigtimedwait(&sigs, NULL, &zero) > 0) {
            fprintf(stderr, "serve: second signal: cancelling the running requests\n");
            ts_sched_drain(S->sched, 0);
        }
    }
    /* let the connection threads write their last bytes (requests still being parsed or tokenized
     * end with a 503 once they look; all of it within --drain, and at least a second) */
    ts_guard_close_idle(S->guard);
    for (double t = ts_now(); atomic_load(&S->in_flight) > 0 && (ts_now() < deadline || ts_now() - t < 1);) {
        struct timespec ms = {0, 10 * 1000000L};
        nanosleep(&ms, NULL);
    }
    MHD_stop_daemon(S->d);
    S->d = NULL;
    fprintf(stderr, "serve: stopped\n");
    status = 0;
    goto done;
fail:
    fprintf(stderr, "turbospark serve: %s\n", err);
done:
    if (S->d) MHD_stop_daemon(S->d);
    ts_guard_free(S->guard);
    ts_sched_free(S->sched);
    if (metrics_ok) ts_metrics_destroy(&S->mt);
    ts_chat_free(S->chat);
    ts_model_free(S->m);
    return status;
}
