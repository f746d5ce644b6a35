/* turbospark run | chat: text in, streamed text out.
 *
 * run:  the prompt (-p TEXT or -f FILE) is completed as is (no chat template), the continuation
 *       streams to stdout; load time, prompt and generation speed go to stderr.
 * chat: an interactive conversation rendered with the model's chat template; the history stays in
 *       the session (only the new turn is evaluated), `/exit` or end of input leaves, Ctrl-C stops
 *       the reply being written (at the prompt it leaves). */
#include "cli/cli.h"

#include "cli/args.h"

#include "turbospark.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct gen_opts {
    ts_cli_args a; /* the shared flags: model, prompt, -n, -c, sampling, ... */
    const char *chat_template, *chat_template_file, *system;
    bool no_jinja;            /* --no-jinja: the built-in chat templates only */
    const char *json_schema;  /* a schema file, or "" for any JSON object (--json); NULL: free text */
    const char *grammar_file; /* GBNF rules, or NULL */
    int reasoning_format;     /* ts_reasoning_format; −1: none for run, deepseek for chat */
    long reasoning_budget;    /* thinking tokens before </think> is forced; −1: no limit */
    int enable_thinking;      /* −1 template default */
    bool no_special;          /* do not parse special tokens in the prompt */
} gen_opts;

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) {
    (void)sig, g_interrupted = 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define GEN_GROUPS (TS_ARGS_GENERATE | TS_ARGS_SAMPLING | TS_ARGS_CONTEXT | TS_ARGS_UBATCH | TS_ARGS_BATCH)

static void usage(FILE *f, bool chat) {
    fprintf(f, "usage: turbospark %s -m FILE.gguf %s[options]\n", chat ? "chat" : "run",
            chat ? "" : "(-p PROMPT | -f FILE) ");
    ts_cli_args_help(f, GEN_GROUPS | (chat ? 0 : TS_ARGS_PROMPT));
    fprintf(f,
            "  (-n defaults to %s, -c to 4096)\n"
            "  --json-schema FILE the output is JSON valid for this schema (constrained decoding;\n"
            "                     after the reasoning when the prompt opens <think>)\n"
            "  --json             the output is a JSON object\n"
            "  --grammar-file F   the output follows these GBNF rules (llama.cpp's grammar syntax)\n"
            "  --reasoning-format F  deepseek: <think> reasoning goes to stderr, the answer to stdout;\n"
            "                     none: the text as generated (default: none for run, deepseek for chat)\n"
            "  --reasoning-budget N  thinking tokens before </think> is forced (default -1: no limit)\n",
            chat ? "512 per reply" : "128");
    if (chat)
        fprintf(
            f,
            "  -sys, --system-prompt TEXT  system message\n"
            "  --chat-template K  a built-in template: chatml | qwen3 | qwen3-thinking (default: the\n"
            "                     file's own Jinja template, or the built-in one recognised from it)\n"
            "  --chat-template-file F  a Jinja chat template to use instead of the file's\n"
            "  --jinja / --no-jinja   render the template with the Jinja engine (default) / built-in only\n"
            "  --think / --no-think   enable_thinking for Qwen3 templates\n"
            "In the conversation: /exit quits; Ctrl-C stops the reply being written.\n");
    else
        fprintf(f, "  --no-special       treat <|...|> markers in the prompt as plain text\n");
}

enum {
    OPT_NO_SPECIAL = TS_ARGS_OWN,
    OPT_THINK,
    OPT_NO_THINK,
    OPT_JSON,
    OPT_SYSTEM,
    OPT_CHAT_TEMPLATE,
    OPT_CHAT_TEMPLATE_FILE,
    OPT_JINJA,
    OPT_NO_JINJA,
    OPT_JSON_SCHEMA,
    OPT_GRAMMAR_FILE,
    OPT_REASONING_BUDGET,
    OPT_REASONING_FORMAT,
};

static const struct option k_run_opts[] = {
    {"no-special", no_argument, NULL, OPT_NO_SPECIAL},
    {"json", no_argument, NULL, OPT_JSON},
    {"json-schema", required_argument, NULL, OPT_JSON_SCHEMA},
    {"grammar-file", required_argument, NULL, OPT_GRAMMAR_FILE},
    {"reasoning-budget", required_argument, NULL, OPT_REASONING_BUDGET},
    {"reasoning-format", required_argument, NULL, OPT_REASONING_FORMAT},
    {0},
};

static const struct option k_chat_opts[] = {
    {"think", no_argument, NULL, OPT_THINK},
    {"no-think", no_argument, NULL, OPT_NO_THINK},
    {"json", no_argument, NULL, OPT_JSON},
    {"sys", required_argument, NULL, OPT_SYSTEM},
    {"system-prompt", required_argument, NULL, OPT_SYSTEM},
    {"chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE},
    {"chat-template-file", required_argument, NULL, OPT_CHAT_TEMPLATE_FILE},
    {"jinja", no_argument, NULL, OPT_JINJA},
    {"no-jinja", no_argument, NULL, OPT_NO_JINJA},
    {"json-schema", required_argument, NULL, OPT_JSON_SCHEMA},
    {"grammar-file", required_argument, NULL, OPT_GRAMMAR_FILE},
    {"reasoning-budget", required_argument, NULL, OPT_REASONING_BUDGET},
    {"reasoning-format", required_argument, NULL, OPT_REASONING_FORMAT},
    {0},
};

static int own_option(void *ctx, int id, const char *v) {
    gen_opts *o = ctx;
    switch (id) {
    case OPT_NO_SPECIAL:
        o->no_special = true;
        return 0;
    case OPT_THINK:
        o->enable_thinking = 1;
        return 0;
    case OPT_NO_THINK:
        o->enable_thinking = 0;
        return 0;
    case OPT_JSON:
        o->json_schema = "";
        return 0;
    case OPT_SYSTEM:
        o->system = v;
        return 0;
    case OPT_CHAT_TEMPLATE:
        o->chat_template = v;
        return 0;
    case OPT_CHAT_TEMPLATE_FILE:
        o->chat_template_file = v;
        return 0;
    case OPT_JINJA:
        o->no_jinja = false;
        return 0;
    case OPT_NO_JINJA:
        o->no_jinja = true;
        return 0;
    case OPT_JSON_SCHEMA:
        o->json_schema = v;
        return 0;
    case OPT_GRAMMAR_FILE:
        o->grammar_file = v;
        return 0;
    case OPT_REASONING_BUDGET:
        if (ts_cli_long(v, -1, 1L << 30, &o->reasoning_budget) == 0) return 0;
        fprintf(stderr, "'--reasoning-budget %s' is not a valid value\n", v);
        return -1;
    case OPT_REASONING_FORMAT: {
        ts_reasoning_format f;
        char e2[128];
        if (ts_reasoning_format_from_name(v, &f, e2, sizeof e2)) {
            fprintf(stderr, "%s\n", e2);
            return -1;
        }
        o->reasoning_format = (int)f;
        return 0;
    }
    }
    return -1;
}

/* 0, 1 for --help (usage printed), −1 (a message on stderr). */
static int parse_args(int argc, char **argv, bool chat, gen_opts *o) {
    memset(o, 0, sizeof *o);
    ts_cli_args_init(&o->a);
    o->a.n_predict = chat ? 512 : 128;
    o->enable_thinking = -1;
    o->reasoning_format = chat ? TS_REASONING_DEEPSEEK : TS_REASONING_NONE, o->reasoning_budget = -1;
    ts_cli_spec spec = {.cmd = chat ? "chat" : "run",
                        .groups = GEN_GROUPS | (chat ? 0 : TS_ARGS_PROMPT),
                        .own = chat ? k_chat_opts : k_run_opts,
                        .own_short = "",
                        .own_cb = own_option,
                        .ctx = o};
    int r = ts_cli_parse(argc, argv, &spec, &o->a);
    if (r == 1) {
        usage(stdout, chat);
        return 1;
    }
    if (r) return -1;
    if (!o->a.model) {
        fprintf(stderr, "no model given (-m FILE.gguf)\n");
        return -1;
    }
    if (!chat && !o->a.prompt == !o->a.file) {
        fprintf(stderr, "give exactly one of -p PROMPT and -f FILE\n");
        return -1;
    }
    return 0;
}

/* Model, tokenizer, session and sampler of one run. */
typedef struct engine {
    ts_model *m;
    const ts_tokenizer *tok; /* the model's */
    ts_session *s;
    ts_sampler *smp;
    float *logits;
    int32_t V;
    uint64_t seed;
    ts_tokens ctx;          /* the ids the session holds, in order */
    ts_grammar *grammar;    /* --json-schema / --json, or NULL */
    ts_grammar_vocab *gvoc; /* with a grammar */
    uint32_t *allow;        /* [V / 32 + 1] */
    uint32_t *no_eog;       /* --ignore-eos: every token but the end-of-generation ones, or NULL */
} engine;

static char *read_file(const char *path, char *err, size_t errlen);

static void engine_free(engine *e) {
    ts_grammar_free(e->grammar);
    ts_grammar_vocab_free(e->gvoc);
    free(e->allow);
    free(e->no_eog);
    ts_sampler_free(e->smp);
    ts_session_free(e->s);
    ts_model_free(e->m);
    free(e->logits);
    ts_tokens_free(&e->ctx);
}

static int engine_init(engine *e, gen_opts *o, const char *cmd) {
    char err[1024];
    memset(e, 0, sizeof *e);
    double t0 = now();
    if (ts_model_load(o->a.model, &e->m, err, sizeof err)) goto fail;
    if (ts_model_tokenizer(e->m, &e->tok, err, sizeof err)) goto fail;
    ts_model_sampling(e->m, &o->a.sp, o->a.sp_given); /* unless given on the command line */
    e->V = ts_model_n_vocab(e->m);
    ts_cli_cap(cmd, "-c", &o->a.n_ctx, (long)ts_model_n_ctx_train(e->m), "the model's trained context");
    const int64_t n_ctx = o->a.n_ctx;
    ts_session_params sp = {.n_ctx = n_ctx, .ubatch = ts_cli_ubatch(cmd, &o->a), .backend = o->a.backend};
    if (ts_session_new(e->m, &sp, &e->s, err, sizeof err)) goto fail;
    if (ts_sampler_new(&o->a.sp, e->V, &e->smp, err, sizeof err)) goto fail;
    if (!(e->logits = malloc((size_t)e->V * sizeof(float)))) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    e->seed = o->a.sp.seed;
    if (o->a.ignore_eos) { /* end-of-generation tokens are never sampled */
        if (!(e->no_eog = malloc(((size_t)e->V / 32 + 1) * sizeof *e->no_eog))) {
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        memset(e->no_eog, 0, ((size_t)e->V / 32 + 1) * sizeof *e->no_eog);
        for (int32_t id = 0; id < e->V; id++)
            if (!ts_tokenizer_is_eog(e->tok, id)) e->no_eog[id / 32] |= 1u << (id % 32);
    }
    if (o->json_schema && o->grammar_file) {
        snprintf(err, sizeof err, "give --json-schema (or --json) or --grammar-file, not both");
        goto fail;
    }
    if (o->json_schema || o->grammar_file) {
        const char *path = o->grammar_file ? o->grammar_file : o->json_schema;
        char *text = *path ? read_file(path, err, sizeof err) : NULL;
        if (*path && !text) goto fail;
        int bad = o->grammar_file ? ts_gbnf_grammar(text, strlen(text), &e->grammar, err, sizeof err)
                                  : ts_json_schema_grammar(text, &e->grammar, err, sizeof err);
        if (!bad) bad = ts_grammar_vocab_new(e->tok, &e->gvoc, err, sizeof err);
        free(text);
        if (bad) goto fail;
        if (!(e->allow = malloc(((size_t)e->V / 32 + 1) * sizeof *e->allow))) {
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
    }
    fprintf(stderr,
            "%s: loaded %s in %.2f s (%.1f MiB of state for %" PRId64
            " tokens); sampling: temp %.2f top-k %d top-p %.2f min-p %.2f seed %" PRIu64 "%s\n",
            cmd, o->a.model, now() - t0, ts_session_state_bytes(e->s) / 1048576.0, n_ctx, o->a.sp.temperature,
            o->a.sp.top_k, o->a.sp.top_p, o->a.sp.min_p, o->a.sp.seed,
            o->a.seed_random ? " (random; -s repeats it)" : "");
    return 0;
fail:
    fprintf(stderr, "turbospark %s: %s\n", cmd, err);
    engine_free(e);
    return -1;
}

/* Evaluates ids after what the session holds (reusing the common prefix of a re-rendered chat). */
static int feed(engine *e, const int32_t *ids, size_t n, char *err, size_t errlen) {
    size_t common = 0;
    while (common < e->ctx.n && common < n && e->ctx.ids[common] == ids[common]) common++;
    if (common < e->ctx.n) { /* the history changed: start over (the recurrent state cannot rewind) */
        ts_session_reset(e->s);
        e->ctx.n = 0, common = 0;
        ts_sampler_reset(e->smp, e->seed);
    }
    if (common == n) return ts_errf(err, errlen, "nothing new to evaluate");
    for (size_t i = common; i < n; i++)
        if (ts_tokens_push(&e->ctx, ids[i])) return ts_errf(err, errlen, "out of memory");
    for (size_t i = common; i < n; i++) ts_sampler_accept(e->smp, ids[i]);
    return ts_session_eval(e->s, ids + common, (int64_t)(n - common), e->logits, false, err, errlen);
}

typedef struct gen_stats {
    int64_t n_gen;
    double t_gen;
    const char *why;
} gen_stats;

/* Samples until an end-of-generation token, a stop string, n_predict, the context end or Ctrl-C,
 * streaming text to stdout. `reply` receives the whole reply (without a stop string). */
/* Released text to the terminal: with the deepseek format the reasoning goes to stderr, the answer
 * to stdout. final: the text is over. */
static int show(ts_think_split *ts, bool split, const char *s, size_t n, bool final, bool *reasoned) {
    if (!split) {
        fwrite(s, 1, n, stdout);
        return 0;
    }
    ts_text r = {0}, c = {0};
    int rc = ts_think_push(ts, s, n, &r, &c);
    if (final) rc |= ts_think_finish(ts, &r, &c);
    if (r.n) fwrite(r.s, 1, r.n, stderr), fflush(stderr), *reasoned = true;
    if (final && *reasoned) fputc('\n', stderr);
    if (c.n) fwrite(c.s, 1, c.n, stdout);
    ts_text_free(&r), ts_text_free(&c);
    return rc;
}

/* The next token: forced (the reasoning budget), under the grammar's mask after the reasoning, or
 * sampled. */
static int next_token(engine *e, ts_matcher *mt, bool thinking, int32_t *id, char *err, size_t errlen) {
    if (mt && !thinking) {
        if (ts_matcher_mask(mt, e->allow, err, errlen)) return -1;
        if (e->no_eog) { /* --ignore-eos, unless the grammar allows nothing else */
            uint32_t any = 0;
            for (int32_t w = 0; w <= e->V / 32; w++) any |= e->allow[w] & e->no_eog[w];
            for (int32_t w = 0; any && w <= e->V / 32; w++) e->allow[w] &= e->no_eog[w];
        }
        *id = ts_sampler_sample_masked(e->smp, e->logits, e->allow);
        return ts_tokenizer_is_eog(e->tok, *id) ? 0 : ts_matcher_accept(mt, *id, err, errlen);
    }
    *id = e->no_eog ? ts_sampler_sample_masked(e->smp, e->logits, e->no_eog)
                    : ts_sampler_sample(e->smp, e->logits);
    return 0;
}

/* Samples until an end-of-generation token, a stop string, n_predict, the context end or Ctrl-C,
 * streaming text to stdout. `reply` receives the whole reply (without a stop string). */
static int generate(engine *e, const gen_opts *o, bool think_open, ts_text *reply, gen_stats *st, char *err,
                    size_t errlen) {
    ts_textgen g;
    ts_textgen_init(&g, e->tok, o->a.stops, o->a.n_stops, reply);
    size_t printed = 0; /* bytes of reply already shown */
    double t0 = now();
    st->n_gen = 0, st->why = "n_predict";
    g_interrupted = 0;
    ts_matcher *mt = NULL; /* the grammar applies once the reasoning (if the prompt opened it) is over */
    if (e->grammar && ts_matcher_new(e->grammar, e->gvoc, &mt, err, errlen)) return -1;
    bool thinking = think_open, split = o->reasoning_format == TS_REASONING_DEEPSEEK;
    int32_t open_id = ts_tokenizer_find(e->tok, "<think>"), close_id = ts_tokenizer_find(e->tok, "</think>");
    ts_tokens forced = {0}; /* "\n</think>\n\n" once the budget is spent */
    size_t n_forced = 0;
    long n_think = 0;
    ts_think_split ts;
    ts_think_init(&ts, think_open);
    bool reasoned = false; /* reasoning was shown (on stderr) */
    int rc = 0;
    for (long i = 0; (o->a.n_predict < 0 || i < o->a.n_predict) && !rc; i++) {
        if (g_interrupted) {
            st->why = "interrupted";
            break;
        }
        if (thinking && !forced.n && o->reasoning_budget >= 0 && n_think >= o->reasoning_budget)
            rc = ts_tokenize(e->tok, "\n</think>\n\n", strlen("\n</think>\n\n"), true, &forced, err, errlen);
        int32_t id;
        if (rc) break;
        if (n_forced < forced.n) {
            id = forced.ids[n_forced++];
            if (n_forced == forced.n) thinking = false;
        } else if ((rc = next_token(e, mt, thinking, &id, err, errlen))) {
            break;
        }
        if (thinking)
            n_think++, thinking = id != close_id || n_forced < forced.n;
        else if (id == open_id && i == 0 && !mt)
            thinking = true;
        if (ts_tokenizer_is_eog(e->tok, id)) {
            st->why = "end of generation";
            break;
        }
        int r = ts_textgen_push(&g, id, err, errlen);
        if (r < 0) {
            rc = -1;
            break;
        }
        st->n_gen++;
        size_t safe = ts_textgen_safe(&g);
        if (safe > printed)
            rc = show(&ts, split, reply->s + printed, safe - printed, false, &reasoned), printed = safe;
        fflush(stdout);
        if (r == 1) {
            st->why = "stop string";
            break;
        }
        if (ts_session_pos(e->s) >= o->a.n_ctx) {
            st->why = "context full";
            break;
        }
        ts_sampler_accept(e->smp, id);
        if (ts_tokens_push(&e->ctx, id))
            rc = ts_errf(err, errlen, "out of memory");
        else if (ts_session_eval(e->s, &id, 1, e->logits, false, err, errlen))
            rc = -1;
    }
    ts_matcher_free(mt);
    ts_tokens_free(&forced);
    if (!rc && ts_textgen_finish(&g)) rc = ts_errf(err, errlen, "out of memory");
    if (!rc && show(&ts, split, reply->s ? reply->s + printed : "", reply->n - printed, true, &reasoned))
        rc = ts_errf(err, errlen, "out of memory");
    ts_think_free(&ts);
    fflush(stdout);
    st->t_gen = now() - t0;
    return rc ? -1 : 0;
}

static char *read_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno)), NULL;
    ts_text t = {0};
    char buf[65536];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0)
        if (ts_text_append(&t, buf, k)) {
            fclose(f);
            ts_text_free(&t);
            return ts_errf(err, errlen, "out of memory"), NULL;
        }
    fclose(f);
    if (ts_text_append(&t, "", 1)) {
        ts_text_free(&t);
        return NULL;
    }
    return t.s;
}

int ts_cmd_run(int argc, char **argv) {
    gen_opts o;
    int pr = parse_args(argc, argv, false, &o);
    if (pr) {
        ts_cli_args_free(&o.a);
        if (pr < 0) usage(stderr, false);
        return pr < 0 ? 2 : 0;
    }
    char err[1024];
    char *file_text = NULL;
    size_t file_len = 0;
    if (o.a.file && !(file_text = ts_cli_read_text(o.a.file, &file_len, err, sizeof err))) {
        fprintf(stderr, "turbospark run: %s\n", err);
        ts_cli_args_free(&o.a);
        return 1;
    }
    engine e;
    if (engine_init(&e, &o, "run")) {
        free(file_text);
        ts_cli_args_free(&o.a);
        return 1;
    }
    const char *text = o.a.prompt ? o.a.prompt : file_text;
    ts_tokens prompt = {0};
    ts_text reply = {0};
    gen_stats st = {0};
    int rc = ts_tokenize(e.tok, text, strlen(text), !o.no_special, &prompt, err, sizeof err);
    if (!rc && prompt.n == 0) rc = ts_errf(err, sizeof err, "the prompt is empty");
    if (!rc && (int64_t)prompt.n >= o.a.n_ctx)
        rc = ts_errf(err, sizeof err,
                     "the prompt has %zu tokens, more than the context of %ld allows (use -c)", prompt.n,
                     o.a.n_ctx);
    double t0 = now();
    if (!rc) rc = feed(&e, prompt.ids, prompt.n, err, sizeof err);
    double t_prompt = now() - t0;
    signal(SIGINT, on_sigint);
    if (!rc) fwrite(text, 1, strlen(text), stdout);
    if (!rc) rc = generate(&e, &o, ts_prompt_opens_think(text, strlen(text)), &reply, &st, err, sizeof err);
    signal(SIGINT, SIG_DFL);
    if (rc) {
        fprintf(stderr, "\nturbospark run: %s\n", err);
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "prompt: %zu tokens in %.2f s (%.1f tokens/s); generation: %" PRId64
                " tokens in %.2f s (%.1f tokens/s); stopped by %s\n",
                prompt.n, t_prompt, prompt.n / t_prompt, st.n_gen, st.t_gen,
                st.n_gen / (st.t_gen > 0 ? st.t_gen : 1), st.why);
    }
    ts_tokens_free(&prompt);
    ts_text_free(&reply);
    free(file_text);
    engine_free(&e);
    ts_cli_args_free(&o.a);
    return rc ? 1 : 0;
}

/* ---- chat ----------------------------------------------------------------------------------- */

/* The conversation so far: a JSON array of {"role", "content"} messages, as ts_chat_apply reads it. */
static int history_add(cJSON *h, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", content)) {
        cJSON_Delete(m);
        return -1;
    }
    return cJSON_AddItemToArray(h, m) ? 0 : (cJSON_Delete(m), -1);
}

/* The prompt text of the conversation (*out malloc'd). */
static int render(const ts_chat *chat, const gen_opts *o, const cJSON *h, char **out, size_t *len, char *err,
                  size_t errlen) {
    char *msgs = cJSON_PrintUnformatted(h);
    if (!msgs) return ts_errf(err, errlen, "out of memory");
    const char *kw = o->enable_thinking < 0 ? NULL
                     : o->enable_thinking   ? "{\"enable_thinking\": true}"
                                            : "{\"enable_thinking\": false}";
    int rc = ts_chat_apply(chat, msgs, NULL, kw, true, out, len, err, errlen);
    free(msgs);
    return rc;
}

int ts_cmd_chat(int argc, char **argv) {
    gen_opts o;
    int pr = parse_args(argc, argv, true, &o);
    if (pr) {
        ts_cli_args_free(&o.a);
        if (pr < 0) usage(stderr, true);
        return pr < 0 ? 2 : 0;
    }
    char err[1024];
    engine e;
    if (engine_init(&e, &o, "chat")) {
        ts_cli_args_free(&o.a);
        return 1;
    }
    ts_chat *chat;
    char note[700];
    if (ts_chat_new(e.tok, o.chat_template, o.chat_template_file, !o.no_jinja, &chat, note, sizeof note, err,
                    sizeof err)) {
        fprintf(stderr, "turbospark chat: %s\n", err);
        engine_free(&e);
        return 1;
    }
    if (note[0]) fprintf(stderr, "note: %s\n", note);
    fprintf(stderr, "chat template: %s. Type a message; /exit to quit; Ctrl-C stops a reply.\n",
            ts_chat_name(chat));
    cJSON *h = cJSON_CreateArray();
    int rc = !h || (o.system && history_add(h, "system", o.system))
                 ? ts_errf(err, sizeof err, "out of memory")
                 : 0;
    char line[16384];
    while (!rc) {
        fprintf(stderr, "\n> ");
        g_interrupted = 0;
        signal(SIGINT, SIG_DFL); /* at the prompt, Ctrl-C leaves */
        if (!fgets(line, sizeof line, stdin)) break;
        size_t L = strlen(line);
        while (L && (line[L - 1] == '\n' || line[L - 1] == '\r')) line[--L] = 0;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!L) continue;
        if (history_add(h, "user", line)) {
            rc = ts_errf(err, sizeof err, "out of memory");
            break;
        }
        ts_text reply = {0};
        ts_tokens prompt = {0};
        char *prompt_text = NULL;
        size_t prompt_len = 0;
        gen_stats st = {0};
        rc = render(chat, &o, h, &prompt_text, &prompt_len, err, sizeof err);
        if (!rc) rc = ts_tokenize(e.tok, prompt_text, prompt_len, true, &prompt, err, sizeof err);
        if (!rc && (int64_t)prompt.n + 1 >= o.a.n_ctx)
            rc = ts_errf(err, sizeof err,
                         "the conversation (%zu tokens) no longer fits the context of %ld tokens; start "
                         "again with a larger -c",
                         prompt.n, o.a.n_ctx);
        if (!rc) rc = feed(&e, prompt.ids, prompt.n, err, sizeof err);
        signal(SIGINT, on_sigint);
        if (!rc)
            rc = generate(&e, &o, ts_prompt_opens_think(prompt_text, prompt_len), &reply, &st, err,
                          sizeof err);
        signal(SIGINT, SIG_DFL);
        if (!rc) {
            printf("\n");
            fflush(stdout);
            fprintf(stderr, "[%" PRId64 " tokens, %.1f tokens/s, %s]\n", st.n_gen,
                    st.n_gen / (st.t_gen > 0 ? st.t_gen : 1), st.why);
            if (history_add(h, "assistant", reply.n ? reply.s : ""))
                rc = ts_errf(err, sizeof err, "out of memory");
        }
        free(prompt_text), ts_text_free(&reply), ts_tokens_free(&prompt);
    }
    if (rc) fprintf(stderr, "turbospark chat: %s\n", err);
    ts_chat_free(chat);
    cJSON_Delete(h);
    engine_free(&e);
    ts_cli_args_free(&o.a);
    return rc ? 1 : 0;
}
