/* turbospark serve: the OpenAI-compatible HTTP server (src/server/). */
#include "cli/cli.h"

#include "server/server.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: turbospark serve -m FILE.gguf [options]\n"
        "  --host ADDR          address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for "
        "all)\n"
        "  --port N             port (default 8080; 0 picks a free one, printed on stderr)\n"
        "  --api-key KEY        require 'Authorization: Bearer KEY' (GET /health stays open)\n"
        "  --api-key-file FILE  the same, the key read from FILE (keeps it out of the process list)\n"
        "  -np N                slots: requests decoded together (default 4)\n"
        "  -c N                 context of each slot in tokens (default 4096, at most the model's)\n"
        "  -ub N                prompt tokens a slot evaluates per step (default 256)\n"
        "  -b N                 prompt tokens per step over all slots (default 512): bounds how long a\n"
        "                       long prompt can hold up the running streams\n"
        "  -t N                 CPU threads\n"
        "  --alias NAME         the model's id in the API (default: the file's name)\n"
        "  --chat-template K    a built-in template: chatml | qwen3 | qwen3-thinking (default: the file's "
        "own\n"
        "                       Jinja template, or the built-in one recognised from it)\n"
        "  --chat-template-file F  a Jinja chat template to use instead of the file's\n"
        "  --jinja / --no-jinja render chat templates with the Jinja engine (default) / the built-in ones "
        "only\n"
        "  --reasoning-format F none | deepseek (default): <think> blocks into reasoning_content\n"
        "  --reasoning-budget N thinking tokens before </think> is forced (default -1: no limit)\n"
        "  --max-queue N        requests waiting for a slot before 503 (default 256)\n"
        "  --max-connections N  open connections (default 512)\n"
        "  --max-connections-per-ip N  open connections from one client address (default 128)\n"
        "  --max-parsing N      connections waiting for or sending a request at once (default 64); past\n"
        "                       it, the oldest one still waiting for its request head is closed\n"
        "  --max-body BYTES     largest request body (default 8388608); a body may also hold at most\n"
        "                       8 JSON values per token of context (-c) plus 4096 (413 past either)\n"
        "  --timeout S          seconds an idle connection is kept (default 60)\n"
        "  --header-timeout S   seconds a client has to send a whole request head (default 10)\n"
        "  --body-timeout S     seconds a client has to send a whole body after its head (default 60)\n"
        "  --allow-host NAME    accept this Host header too (repeatable; '*' any). By default only\n"
        "                       loopback names and the --host value are accepted (DNS rebinding)\n"
        "  --cors ORIGIN        answer CORS for this web origin, e.g. http://localhost:3000 (repeatable;\n"
        "                       '*' any); without it, browsers' cross-origin POSTs are refused (403)\n"
        "  --drain S            on SIGINT/SIGTERM, seconds running requests may finish (default 30)\n"
        "  --no-cache-prompt    never reuse a slot's previous sequence or the prefix cache\n"
        "  --cache-ram MiB      the prefix cache shared by the slots: snapshots of whole sequence states\n"
        "                       at the end of prompts and replies, least recently used evicted\n"
        "                       (default 1024; 0: off). Host memory: with --backend cuda and no\n"
        "                       --cache-gpu a snapshot is copied from the GPU to host RAM and back\n"
        "  --cache-gpu MiB      CUDA: keep the prefix cache's snapshots in this much GPU memory, reserved\n"
        "                       at start beside the slots (device-to-device copies: the fastest save and\n"
        "                       restore); when full, the least recently used ones move to pinned host\n"
        "                       memory, counted by --cache-ram. Default 0 (off): GPU memory left over\n"
        "                       depends on the model, -np and -c, so you choose it; `turbospark plan`\n"
        "                       shows what they take\n"
        "  --cache-every N      also a snapshot every N prompt tokens of a prefill (default 2048; 0:\n"
        "                       at prompt ends only), so prompts sharing a long prefix share it\n"
        "  --slot-save-path DIR enable POST /slots/{id}?action=save|restore|erase (llama-server's): a\n"
        "                       slot's state and tokens to and from a file in DIR, an existing directory\n"
        "  --quiet              no per-request log lines\n"
        "  --random-weights     CUDA: fill every weight with random valid blocks on the GPU instead of\n"
        "                       reading the file (load tests on synthetic files: synth --released --sparse)\n"
        "  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --repeat-last-n N\n"
        "  --presence-penalty P --frequency-penalty F\n"
        "                       sampling defaults for requests that leave them out (else the file's\n"
        "                       general.sampling.*, else llama.cpp's)\n" TS_CLI_BACKEND_HELP);
}

static int parse_long(const char *s, long lo, long hi, long *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || end == s || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *v) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || *end || end == s || !(x >= lo && x <= hi)) return -1;
    *v = x;
    return 0;
}

static char *read_key_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "turbospark serve: cannot open --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    if (!n) {
        fprintf(stderr, "turbospark serve: --api-key-file %s is empty\n", path);
        return NULL;
    }
    return strdup(buf);
}

int ts_cmd_serve(int argc, char **argv) {
    ts_server_opts o;
    ts_server_default_opts(&o);
    const char *backend = "cpu", *key_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long k = 0;
        double d = 0;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-cache-prompt")) {
            o.cache_prompt = false;
            continue;
        }
        if (!strcmp(a, "--random-weights")) {
            o.random_weights = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        }
        if (!strcmp(a, "--jinja") || !strcmp(a, "--no-jinja")) {
            o.no_jinja = a[2] == 'n';
            continue;
        }
        if (!v) {
            fprintf(stderr, "turbospark serve: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m"))
            o.model_path = v;
        else if (!strcmp(a, "--host"))
            o.host = v;
        else if (!strcmp(a, "--port"))
            bad = parse_long(v, 0, 65535, &k), o.port = (int)k;
        else if (!strcmp(a, "--api-key"))
            o.api_key = v;
        else if (!strcmp(a, "--api-key-file"))
            key_file = v;
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel"))
            bad = parse_long(v, 1, 1024, &k), o.n_slots = (int)k;
        else if (!strcmp(a, "-c"))
            bad = parse_long(v, 8, INT32_MAX, &k), o.n_ctx = k;
        else if (!strcmp(a, "-ub"))
            bad = parse_long(v, 1, 1 << 20, &k), o.chunk = k;
        else if (!strcmp(a, "-b"))
            bad = parse_long(v, 1, 1 << 22, &k), o.step_tokens = k;
        else if (!strcmp(a, "--cache-every"))
            bad = parse_long(v, 0, INT32_MAX, &k), o.cache_every = k;
        else if (!strcmp(a, "--cache-ram"))
            bad = parse_long(v, 0, 1 << 24, &k), o.cache_ram = (size_t)k << 20;
        else if (!strcmp(a, "--cache-gpu"))
            bad = parse_long(v, 0, 1 << 24, &k), o.cache_gpu = (size_t)k << 20;
        else if (!strcmp(a, "--slot-save-path"))
            o.slot_save_path = v;
        else if (!strcmp(a, "-t"))
            bad = parse_long(v, 1, 4096, &k), o.threads = (int)k;
        else if (!strcmp(a, "--alias"))
            o.alias = v;
        else if (!strcmp(a, "--chat-template"))
            o.chat_template = v;
        else if (!strcmp(a, "--chat-template-file"))
            o.chat_template_file = v;
        else if (!strcmp(a, "--reasoning-format")) {
            char e2[128];
            if (ts_reasoning_format_from_name(v, &o.reasoning_format, e2, sizeof e2)) {
                fprintf(stderr, "turbospark serve: %s\n", e2);
                return 1;
            }
        } else if (!strcmp(a, "--reasoning-budget"))
            bad = parse_long(v, -1, 1L << 30, &k), o.reasoning_budget = k;
        else if (!strcmp(a, "--max-queue"))
            bad = parse_long(v, 0, 1 << 20, &k), o.max_queue = (int)k;
        else if (!strcmp(a, "--max-connections"))
            bad = parse_long(v, 1, 1 << 16, &k), o.max_connections = (int)k;
        else if (!strcmp(a, "--max-connections-per-ip"))
            bad = parse_long(v, 1, 1 << 16, &k), o.max_per_ip = (int)k;
        else if (!strcmp(a, "--max-parsing"))
            bad = parse_long(v, 1, 1 << 16, &k), o.max_parsing = (int)k;
        else if (!strcmp(a, "--header-timeout"))
            bad = parse_double(v, 0.1, 86400, &o.header_timeout);
        else if (!strcmp(a, "--body-timeout"))
            bad = parse_double(v, 0.1, 86400, &o.body_timeout);
        else if (!strcmp(a, "--allow-host") || !strcmp(a, "--cors")) {
            bool host = a[2] == 'a';
            int *n = host ? &o.n_allow_hosts : &o.n_cors;
            if (*n == TS_SERVER_MAX_LIST || !*v) {
                fprintf(stderr, "turbospark serve: '%s' is empty or given more than %d times\n", a,
                        TS_SERVER_MAX_LIST);
                return 2;
            }
            (host ? o.allow_hosts : o.cors)[(*n)++] = v;
        } else if (!strcmp(a, "--max-body"))
            bad = parse_long(v, 1024, 1L << 30, &k), o.max_body = (size_t)k;
        else if (!strcmp(a, "--timeout"))
            bad = parse_long(v, 1, 86400, &k), o.idle_timeout = (int)k;
        else if (!strcmp(a, "--drain"))
            bad = parse_double(v, 0, 86400, &o.drain_seconds);
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--temp"))
            bad = parse_double(v, 0, 100, &d), o.sp.temperature = (float)d,
            o.sp_given[TS_SAMPLING_TEMP] = true;
        else if (!strcmp(a, "--top-k"))
            bad = parse_long(v, 0, INT32_MAX, &k), o.sp.top_k = (int32_t)k,
            o.sp_given[TS_SAMPLING_TOP_K] = true;
        else if (!strcmp(a, "--top-p"))
            bad = parse_double(v, 0, 1, &d), o.sp.top_p = (float)d, o.sp_given[TS_SAMPLING_TOP_P] = true;
        else if (!strcmp(a, "--min-p"))
            bad = parse_double(v, 0, 1, &d), o.sp.min_p = (float)d, o.sp_given[TS_SAMPLING_MIN_P] = true;
        else if (!strcmp(a, "--repeat-penalty"))
            bad = parse_double(v, 1e-6, 100, &d), o.sp.repeat_penalty = (float)d;
        else if (!strcmp(a, "--repeat-last-n"))
            bad = parse_long(v, -1, 4096, &k), o.sp.penalty_last_n = (int32_t)k;
        else if (!strcmp(a, "--presence-penalty"))
            bad = parse_double(v, -2, 2, &d), o.sp.presence_penalty = (float)d;
        else if (!strcmp(a, "--frequency-penalty"))
            bad = parse_double(v, -2, 2, &d), o.sp.frequency_penalty = (float)d;
        else {
            fprintf(stderr, "turbospark serve: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "turbospark serve: '%s %s' is not a valid value\n", a, v);
            return 2;
        }
    }
    if (!o.model_path) {
        fprintf(stderr, "turbospark serve: no model given (-m FILE.gguf)\n");
        usage(stderr);
        return 2;
    }
    if (o.cache_gpu && strcmp(backend, "cuda")) {
        fprintf(stderr,
                "turbospark serve: --cache-gpu needs --backend cuda (the CPU backend keeps the prefix "
                "cache in host memory: --cache-ram)\n");
        return 2;
    }
    if (o.cache_gpu && (!o.cache_ram || !o.cache_prompt)) {
        fprintf(stderr, "turbospark serve: --cache-gpu needs the prefix cache on (--cache-ram above 0, no "
                        "--no-cache-prompt): its entries and logits live in host memory\n");
        return 2;
    }
    if (ts_cli_backend(backend, &o.backend)) return 2;
    if (o.random_weights && o.backend != TS_BACKEND_CUDA) {
        fprintf(stderr, "turbospark serve: --random-weights needs --backend cuda\n");
        return 2;
    }
    if (o.step_tokens < o.chunk) {
        fprintf(stderr, "turbospark serve: -b (%ld) must be at least -ub (%ld)\n", (long)o.step_tokens,
                (long)o.chunk);
        return 2;
    }
    char *key = NULL;
    if (key_file) {
        if (o.api_key) {
            fprintf(stderr, "turbospark serve: give --api-key or --api-key-file, not both\n");
            return 2;
        }
        if (!(key = read_key_file(key_file))) return 1;
        o.api_key = key;
    }
    if (o.api_key && !*o.api_key) {
        fprintf(stderr, "turbospark serve: --api-key is empty\n");
        return 2;
    }
    int rc = ts_serve(&o);
    free(key);
    return rc;
}
