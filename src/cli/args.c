/* The shared argument parser of the model-running commands (see args.h). */
#include "cli/args.h"

#include "cli/cli.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Ids of the shared long-only options. */
enum {
    OPT_BACKEND = 0x100,
    OPT_NO_ESCAPE,
    OPT_IGNORE_EOS,
    OPT_STOP,
    OPT_TEMP,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_REPEAT_PENALTY,
    OPT_REPEAT_LAST_N,
    OPT_PRESENCE,
    OPT_FREQUENCY,
    OPT_UBATCH,
    OPT_BATCH,
    OPT_IGNORED_FLAG,  /* a llama.cpp flag without a value that means nothing here */
    OPT_IGNORED_VALUE, /* the same with a value */
    OPT_FLASH_ATTN,    /* -fa: no value in older llama.cpp, on|off|auto in newer */
};

typedef struct shared_opt {
    struct option o;
    unsigned group; /* 0: every command */
    char letter;    /* its short form, or 0 */
} shared_opt;

static const shared_opt k_shared[] = {
    {{"model", required_argument, NULL, 'm'}, 0, 'm'},
    {{"backend", required_argument, NULL, OPT_BACKEND}, 0, 0},
    {{"threads", required_argument, NULL, 't'}, 0, 't'},
    {{"help", no_argument, NULL, 'h'}, 0, 'h'},
    {{"prompt", required_argument, NULL, 'p'}, TS_ARGS_PROMPT, 'p'},
    {{"file", required_argument, NULL, 'f'}, TS_ARGS_PROMPT | TS_ARGS_FILE, 'f'},
    {{"escape", no_argument, NULL, 'e'}, TS_ARGS_PROMPT, 'e'},
    {{"no-escape", no_argument, NULL, OPT_NO_ESCAPE}, TS_ARGS_PROMPT, 0},
    {{"n-predict", required_argument, NULL, 'n'}, TS_ARGS_GENERATE, 'n'},
    {{"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS}, TS_ARGS_GENERATE, 0},
    {{"stop", required_argument, NULL, OPT_STOP}, TS_ARGS_GENERATE, 0},
    {{"reverse-prompt", required_argument, NULL, OPT_STOP}, TS_ARGS_GENERATE, 0},
    {{"seed", required_argument, NULL, 's'}, TS_ARGS_SAMPLING, 's'},
    {{"temp", required_argument, NULL, OPT_TEMP}, TS_ARGS_SAMPLING, 0},
    {{"top-k", required_argument, NULL, OPT_TOP_K}, TS_ARGS_SAMPLING, 0},
    {{"top-p", required_argument, NULL, OPT_TOP_P}, TS_ARGS_SAMPLING, 0},
    {{"min-p", required_argument, NULL, OPT_MIN_P}, TS_ARGS_SAMPLING, 0},
    {{"repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY}, TS_ARGS_SAMPLING, 0},
    {{"repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N}, TS_ARGS_SAMPLING, 0},
    {{"presence-penalty", required_argument, NULL, OPT_PRESENCE}, TS_ARGS_SAMPLING, 0},
    {{"frequency-penalty", required_argument, NULL, OPT_FREQUENCY}, TS_ARGS_SAMPLING, 0},
    {{"ctx-size", required_argument, NULL, 'c'}, TS_ARGS_CONTEXT, 'c'},
    {{"ubatch-size", required_argument, NULL, OPT_UBATCH}, TS_ARGS_UBATCH, 0},
    {{"ubatch", required_argument, NULL, OPT_UBATCH}, TS_ARGS_UBATCH, 0},
    {{"ub", required_argument, NULL, OPT_UBATCH}, TS_ARGS_UBATCH, 0},
    {{"batch-size", required_argument, NULL, 'b'}, TS_ARGS_BATCH, 'b'},
    /* llama.cpp flags with no meaning here: a note, then ignored */
    {{"n-gpu-layers", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"gpu-layers", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"ngl", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"split-mode", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"sm", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"main-gpu", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"mg", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"tensor-split", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"ts", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"numa", required_argument, NULL, OPT_IGNORED_VALUE}, 0, 0},
    {{"flash-attn", no_argument, NULL, OPT_FLASH_ATTN}, 0, 0},
    {{"fa", no_argument, NULL, OPT_FLASH_ATTN}, 0, 0},
    {{"mlock", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"no-mmap", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"mmap", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"no-kv-offload", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"nkvo", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"cont-batching", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"cb", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"no-warmup", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"no-display-prompt", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
    {{"log-disable", no_argument, NULL, OPT_IGNORED_FLAG}, 0, 0},
};
#define N_SHARED (sizeof k_shared / sizeof *k_shared)

void ts_cli_args_init(ts_cli_args *a) {
    memset(a, 0, sizeof *a);
    a->backend_name = "cpu";
    a->escape = true;
    a->n_predict = 128, a->n_ctx = 4096, a->ubatch = 0, a->batch = 2048;
    a->sp = ts_sampler_default_params();
    a->seed_random = true;
}

void ts_cli_args_free(ts_cli_args *a) {
    for (int i = 0; i < a->n_owned; i++) free(a->owned[i]);
    a->n_owned = 0;
}

int ts_cli_long(const char *s, long lo, long hi, long *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || end == s || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

int ts_cli_float(const char *s, float lo, float hi, float *v) {
    char *end;
    errno = 0;
    float x = strtof(s, &end);
    if (errno || *end || end == s || !(x >= lo && x <= hi)) return -1;
    *v = x;
    return 0;
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

void ts_cli_unescape(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        if (r[0] != '\\' || !r[1]) {
            *w++ = *r++;
            continue;
        }
        char c = r[1];
        int hi, lo;
        if (c == 'n')
            *w++ = '\n', r += 2;
        else if (c == 'r')
            *w++ = '\r', r += 2;
        else if (c == 't')
            *w++ = '\t', r += 2;
        else if (c == '\'' || c == '"' || c == '\\')
            *w++ = c, r += 2;
        else if (c == 'x' && (hi = hexval(r[2])) >= 0 && (lo = hexval(r[3])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi << 4 | lo), r += 4;
        } else {
            *w++ = *r++; /* unknown escape (or \x00): kept as written */
        }
    }
    *w = 0;
}

char *ts_cli_read_text(const char *path, size_t *n, char *err, size_t errlen) {
    bool in = !strcmp(path, "-");
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f) return snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno)), NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len == cap) {
            char *b = cap < ((size_t)1 << 40) ? realloc(buf, 2 * cap + 1) : NULL;
            if (!b) free(buf);
            buf = b, cap *= 2;
        }
    }
    bool bad = buf && ferror(f);
    if (!in) fclose(f);
    if (!buf || bad) {
        snprintf(err, errlen, buf ? "cannot read %s" : "out of memory reading %s",
                 in ? "standard input" : path);
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    *n = len;
    return buf;
}

bool ts_cli_cap(const char *cmd, const char *flag, long *value, long limit, const char *why) {
    if (*value <= limit) return false;
    fprintf(stderr, "turbospark %s: warning: %s %ld capped to %ld (%s)\n", cmd, flag, *value, limit, why);
    *value = limit;
    return true;
}

long ts_cli_ubatch(const char *cmd, const ts_cli_args *a) {
    long ub = a->ubatch;
    if (a->ubatch_given && a->batch_given)
        ts_cli_cap(cmd, "-ub", &ub, a->batch, "the batch size -b");
    else if (!a->ubatch_given)
        ub = a->batch_given && a->batch < TS_UBATCH_AUTO_CUDA ? a->batch : 0;
    return ub;
}

static uint64_t random_seed(void) {
    uint32_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        s = (uint32_t)(t.tv_nsec ^ t.tv_sec * 2654435761u ^ (uint32_t)getpid() * 40503u);
    }
    return s & 0x7fffffff; /* small enough to type back in with -s */
}

/* A copy of s that the args own, escapes processed when asked. */
static const char *keep(ts_cli_args *a, const char *s) {
    if (!a->escape) return s;
    char *c = strdup(s);
    if (!c || a->n_owned == (int)(sizeof a->owned / sizeof *a->owned)) {
        free(c);
        return NULL;
    }
    a->owned[a->n_owned++] = c;
    ts_cli_unescape(c);
    return c;
}

static void note_ignored(const char *cmd, const char *flag) {
    fprintf(stderr, "turbospark %s: note: %s has no effect here and is ignored (%s)\n", cmd, flag,
            ts_have_cuda() ? "--backend cuda puts the whole model on one GPU; the rest is fixed"
                           : "this engine decides memory placement and attention kernels itself");
}

static int shared(const ts_cli_spec *spec, ts_cli_args *a, int id, const char *arg, const char *flag) {
    int bad = 0;
    long k = 0;
    switch (id) {
    case 'm':
        a->model = arg;
        break;
    case OPT_BACKEND:
        a->backend_name = arg;
        break;
    case 't':
        bad = ts_cli_long(arg, 1, 4096, &a->threads);
        break;
    case 'p':
        a->prompt = arg;
        break;
    case 'f':
        a->file = arg;
        break;
    case 'e':
        a->escape = true;
        break;
    case OPT_NO_ESCAPE:
        a->escape = false;
        break;
    case 'n':
        bad = ts_cli_long(arg, -2, 1L << 30, &a->n_predict),
        a->n_predict = a->n_predict < 0 ? -1 : a->n_predict;
        break;
    case OPT_IGNORE_EOS:
        a->ignore_eos = true;
        break;
    case OPT_STOP:
        if (a->n_stops == TS_CLI_MAX_STOPS || !*arg) {
            fprintf(stderr, "turbospark %s: %s: at most %d non-empty strings\n", spec->cmd, flag,
                    TS_CLI_MAX_STOPS);
            return -1;
        }
        a->stops[a->n_stops++] = arg; /* escaped after the loop, once --no-escape is known */
        break;
    case 's':
        bad = ts_cli_long(arg, -1, LONG_MAX, &k);
        a->seed_random = k < 0, a->sp.seed = k < 0 ? 0 : (uint64_t)k;
        break;
    case OPT_TEMP:
        bad = ts_cli_float(arg, -FLT_MAX, FLT_MAX, &a->sp.temperature), a->sp_given[TS_SAMPLING_TEMP] = true;
        break;
    case OPT_TOP_K:
        bad = ts_cli_long(arg, INT32_MIN, INT32_MAX, &k), a->sp.top_k = (int32_t)k,
        a->sp_given[TS_SAMPLING_TOP_K] = true;
        break;
    case OPT_TOP_P:
        bad = ts_cli_float(arg, -FLT_MAX, FLT_MAX, &a->sp.top_p), a->sp_given[TS_SAMPLING_TOP_P] = true;
        break;
    case OPT_MIN_P:
        bad = ts_cli_float(arg, -FLT_MAX, FLT_MAX, &a->sp.min_p), a->sp_given[TS_SAMPLING_MIN_P] = true;
        break;
    case OPT_REPEAT_PENALTY:
        bad = ts_cli_float(arg, -FLT_MAX, FLT_MAX, &a->sp.repeat_penalty);
        break;
    case OPT_REPEAT_LAST_N:
        bad = ts_cli_long(arg, -1, 4096, &k), a->sp.penalty_last_n = (int32_t)k;
        break;
    case OPT_PRESENCE:
        bad = ts_cli_float(arg, -FLT_MAX, FLT_MAX, &a->sp.presence_penalty);
        break;
    case OPT_FREQUENCY:
        bad = ts_cli_float(arg, -FLT_MAX, FLT_MAX, &a->sp.frequency_penalty);
        break;
    case 'c':
        bad = ts_cli_long(arg, 8, INT32_MAX, &a->n_ctx), a->n_ctx_given = true;
        break;
    case OPT_UBATCH:
        bad = ts_cli_long(arg, 1, 1 << 20, &a->ubatch), a->ubatch_given = true;
        break;
    case 'b':
        bad = ts_cli_long(arg, 1, 1 << 22, &a->batch), a->batch_given = true;
        break;
    default:
        return -1; /* unreachable: getopt answers only the options it was given */
    }
    if (bad) fprintf(stderr, "turbospark %s: '%s %s' is not a valid value\n", spec->cmd, flag, arg);
    return bad ? -1 : 0;
}

/* Whether getopt's answer c is one of the command's own options (which win over shared letters). */
static bool is_own(const ts_cli_spec *spec, int c) {
    if (!spec->own_cb) return false;
    for (const struct option *o = spec->own; o && o->name; o++)
        if (o->val == c) return true;
    return c > 0 && c < 128 && spec->own_short && strchr(spec->own_short, c) && c != ':';
}

int ts_cli_parse(int argc, char **argv, const ts_cli_spec *spec, ts_cli_args *a) {
    struct option opts[N_SHARED + 64];
    char shorts[128] = "+:"; /* stop at the first non-option; ':' reports a missing value apart */
    size_t n = 0, ns = 2;
    for (size_t i = 0; i < N_SHARED; i++) {
        if (k_shared[i].group && !(k_shared[i].group & spec->groups)) continue;
        opts[n++] = k_shared[i].o;
        if (k_shared[i].letter && !strchr(shorts, k_shared[i].letter)) {
            shorts[ns++] = k_shared[i].letter;
            if (k_shared[i].o.has_arg) shorts[ns++] = ':';
        }
    }
    for (const struct option *o = spec->own; o && o->name && n < N_SHARED + 63; o++) opts[n++] = *o;
    opts[n] = (struct option){0};
    if (spec->own_short) snprintf(shorts + ns, sizeof shorts - ns, "%s", spec->own_short);
    opterr = 0, optind = 0; /* 0: glibc starts a fresh scan */
    int c;
    for (;;) {
        int prev = optind;
        c = getopt_long_only(argc, argv, shorts, opts, NULL);
        if (c == -1) break;
        char fl[64]; /* the flag as written, for messages */
        snprintf(fl, sizeof fl, "%s", argv[prev]);
        char *eq = strchr(fl, '=');
        if (eq) *eq = 0;
        if (c == '?') {
            fprintf(stderr, "turbospark %s: unknown option '%s'\n", spec->cmd, argv[prev]);
            return -1;
        }
        if (c == ':') {
            fprintf(stderr, "turbospark %s: option '%s' needs a value\n", spec->cmd, argv[prev]);
            return -1;
        }
        if (c == 'h') return 1;
        if (c == OPT_IGNORED_FLAG || c == OPT_IGNORED_VALUE) {
            note_ignored(spec->cmd, fl);
            continue;
        }
        if (c == OPT_FLASH_ATTN) { /* newer llama.cpp: -fa on|off|auto */
            if (optind < argc && (!strcmp(argv[optind], "on") || !strcmp(argv[optind], "off") ||
                                  !strcmp(argv[optind], "auto")))
                optind++;
            note_ignored(spec->cmd, fl);
            continue;
        }
        int r = is_own(spec, c) ? spec->own_cb(spec->ctx, c, optarg) : shared(spec, a, c, optarg, fl);
        if (r) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "turbospark %s: unexpected argument '%s'\n", spec->cmd, argv[optind]);
        return -1;
    }
    if (a->prompt && !(a->prompt = keep(a, a->prompt))) return fprintf(stderr, "out of memory\n"), -1;
    for (int i = 0; i < a->n_stops; i++) {
        if (!(a->stops[i] = keep(a, a->stops[i]))) return fprintf(stderr, "out of memory\n"), -1;
        if (!*a->stops[i]) {
            fprintf(stderr, "turbospark %s: --stop: a stop string is empty after its escapes\n", spec->cmd);
            return -1;
        }
    }
    if (a->seed_random) a->sp.seed = random_seed();
#ifdef _OPENMP
    if (a->threads > 0) omp_set_num_threads((int)a->threads);
#endif
    return ts_cli_backend(a->backend_name, &a->backend) ? -1 : 0;
}

void ts_cli_args_help(FILE *f, unsigned g) {
    fprintf(f, "  -m, --model FILE      the GGUF file\n" TS_CLI_BACKEND_HELP
               "  -t, --threads N       CPU threads (default: every core)\n");
    if (g & TS_ARGS_PROMPT)
        fprintf(f,
                "  -p, --prompt TEXT     the prompt\n"
                "  -f, --file FILE       the prompt from a file (- reads standard input; taken as is)\n"
                "  -e, --escape          process \\n \\r \\t \\' \\\" \\\\ \\xHH in -p and --stop (default)\n"
                "      --no-escape       take -p and --stop literally\n");
    else if (g & TS_ARGS_FILE)
        fprintf(f, "  -f, --file FILE       the text (- reads standard input)\n");
    if (g & TS_ARGS_GENERATE)
        fprintf(
            f,
            "  -n, --n-predict N     tokens to generate (-1: until end of generation or of the context)\n"
            "      --ignore-eos      never stop at an end-of-generation token (they are not sampled)\n"
            "      --stop STR        stop when the output contains STR (up to %d; --reverse-prompt too)\n",
            TS_CLI_MAX_STOPS);
    if (g & TS_ARGS_CONTEXT)
        fprintf(
            f,
            "  -c, --ctx-size N      context size in tokens (at most the model's; a warning when capped)\n");
    if (g & TS_ARGS_UBATCH)
        fprintf(
            f,
            "  -ub, --ubatch-size N  prompt tokens one forward call evaluates (micro-batch; default: 512 on\n"
            "                        the CPU, 4096 on CUDA, halved while the GPU cannot hold its "
            "workspaces)\n");
    if (g & TS_ARGS_BATCH)
        fprintf(f, "  -b, --batch-size N    logical batch (default 2048); the micro-batch is at most this\n");
    if (g & TS_ARGS_SAMPLING)
        fprintf(f, "  -s, --seed N          sampling seed (default -1: random, printed on stderr)\n"
                   "  --temp T              temperature (0 = greedy); defaults come from the file's "
                   "general.sampling.*\n"
                   "  --top-k K  --top-p P  --min-p P\n"
                   "  --repeat-penalty R  --repeat-last-n N  --presence-penalty P  --frequency-penalty F\n");
    fprintf(f, "  llama.cpp flags that mean nothing here (-ngl, -fa, --mlock, --no-mmap, ...) are accepted "
               "with a note.\n");
}

void ts_cli_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}
