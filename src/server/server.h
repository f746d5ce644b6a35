/* turbospark serve: an OpenAI-compatible HTTP server (libmicrohttpd) over the scheduler.
 *
 * Threads: libmicrohttpd runs one thread per connection (bounded by max_connections). A connection
 * thread parses, renders the chat template and tokenizes (the tokenizer is immutable and shared),
 * submits a job and then waits on it, polling its socket every 100 ms so that a client that goes
 * away cancels its job even when no byte is being written. One scheduler thread owns the model
 * (sched.h). The main thread waits for SIGINT/SIGTERM.
 *
 * Bounds: guard.h (deadlines for a request's head and body, the connections being parsed), the
 * body size and its JSON value count (openai.h), the queue (sched.h).
 *
 * Shutdown: the first signal stops accepting connections, closes those not being answered, answers
 * 503 to new requests on open connections, cancels queued jobs and lets running ones finish for up
 * to drain_seconds (a second signal cancels them at once); then the daemon stops and everything is
 * freed. */
#ifndef TS_SERVER_SERVER_H
#define TS_SERVER_SERVER_H

#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_SERVER_MAX_LIST 16 /* --allow-host and --cors values */

typedef struct ts_server_opts {
    const char *model_path;
    const char *host;               /* numeric address or name; default 127.0.0.1 */
    int port;                       /* 0: any free port (the chosen one is printed) */
    const char *api_key;            /* NULL: no authentication */
    const char *alias;              /* the model's name in the API (default: the file's base name) */
    const char *chat_template;      /* override: chatml | qwen3 | qwen3-thinking */
    const char *chat_template_file; /* a Jinja template to use instead of the file's, or NULL */
    bool no_jinja;                  /* --no-jinja: the hand-written templates only (chat.h) */
    int n_slots;
    int64_t n_ctx;       /* per slot */
    int64_t chunk;       /* prompt tokens per slot and step */
    int64_t step_tokens; /* prompt tokens per step */
    int max_queue;
    int max_connections;
    int max_per_ip;        /* connections from one client address */
    int max_parsing;       /* connections waiting for or sending a request at once (guard.h) */
    size_t max_body;       /* bytes */
    int idle_timeout;      /* seconds an idle connection is kept */
    double header_timeout; /* seconds to send a whole request head */
    double body_timeout;   /* seconds to send a whole body after the head */
    const char *allow_hosts[TS_SERVER_MAX_LIST]; /* Host header values accepted beyond loopback and --host */
    int n_allow_hosts;
    const char *cors[TS_SERVER_MAX_LIST]; /* origins answered with CORS headers ("*": any) */
    int n_cors;
    int threads; /* CPU threads for the forward (0: default) */
    double drain_seconds;
    bool cache_prompt;
    size_t cache_ram;           /* host bytes the prefix cache holds: snapshots, logits, tree (0: off) */
    size_t cache_gpu;           /* CUDA: GPU bytes for the prefix cache's snapshots (0: none) */
    int64_t cache_every;        /* prompt tokens between snapshots during a prefill (0: prompt ends only) */
    const char *slot_save_path; /* the directory of POST /slots/{id}?action=save|restore, or NULL (off) */
    bool quiet;                 /* no per-request log lines */
    ts_backend backend;
    bool random_weights; /* CUDA: random valid weight blocks instead of the file's (synthetic files) */
    ts_reasoning_format reasoning_format; /* deepseek (default): <think> into reasoning_content */
    int64_t reasoning_budget;             /* thinking tokens before </think> is forced; −1: no limit */
    ts_sampler_params sp;
    bool sp_given[TS_SAMPLING_N_KEYS];
} ts_server_opts;

void ts_server_default_opts(ts_server_opts *o);

/* Loads the model, serves until SIGINT/SIGTERM, and returns the process exit status
 * (0 after a clean shutdown, 1 when it could not start). */
int ts_serve(const ts_server_opts *o);

#endif
