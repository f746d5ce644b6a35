/* The argument parser of the commands that run the model (run, chat, perplexity, bench): one
 * getopt_long_only loop with llama.cpp's long names and short forms.
 *
 * Every command gets -m/--model, --backend, -t/--threads, -h/--help, and the llama.cpp flags that
 * have no meaning here (-ngl, -fa, --mlock, --no-mmap, ...), which are accepted with a one-line
 * note on stderr. A command adds groups of shared options (TS_ARGS_*) and its own options, which
 * the parser hands to the command's callback. Multi-letter single-dash forms (-ub, -ngl, -sys) are
 * long options read by getopt_long_only; single letters (-m, -n, -c) are short options and take
 * their value attached too (-n16).
 *
 * Every value is checked (a sentence naming the flag and the accepted range); a value that the
 * command later lowers (-c above the model's context, -ub above -b) is reported by ts_cli_cap. */
#ifndef TS_CLI_ARGS_H
#define TS_CLI_ARGS_H

#include "turbospark.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define TS_CLI_MAX_STOPS 8

enum {
    TS_ARGS_PROMPT = 1 << 0,   /* -p/--prompt, -f/--file (- for stdin), -e/--escape, --no-escape */
    TS_ARGS_GENERATE = 1 << 1, /* -n/--n-predict, --ignore-eos, --stop */
    TS_ARGS_SAMPLING = 1 << 2, /* -s/--seed, --temp, --top-k, --top-p, --min-p, penalties */
    TS_ARGS_CONTEXT = 1 << 3,  /* -c/--ctx-size */
    TS_ARGS_UBATCH = 1 << 4,   /* -ub/--ubatch-size (also --ubatch) */
    TS_ARGS_BATCH = 1 << 5,    /* -b/--batch-size */
    TS_ARGS_FILE = 1 << 6,     /* -f/--file alone (- for stdin) */
};

/* Ids of a command's own options start here (below are the shared ones and short letters). */
#define TS_ARGS_OWN 0x1000

typedef struct ts_cli_args {
    const char *model;
    const char *backend_name; /* --backend (default "cpu") */
    ts_backend backend;
    const char *prompt; /* -p TEXT, escapes processed unless --no-escape */
    const char *file;   /* -f PATH, "-" for stdin */
    bool escape;        /* -e/--escape (default) or --no-escape */
    long n_predict;     /* -n; −1: until an end-of-generation token or the end of the context */
    long n_ctx;         /* -c */
    long ubatch, batch; /* -ub, -b */
    bool n_ctx_given, ubatch_given, batch_given;
    long threads; /* -t; 0: OpenMP's default */
    bool ignore_eos;
    const char *stops[TS_CLI_MAX_STOPS];
    int n_stops;
    ts_sampler_params sp;
    bool sp_given[TS_SAMPLING_N_KEYS]; /* temperature, top-k, top-p, min-p given (else the file's) */
    bool seed_random;                  /* no -s, or -s -1: a seed drawn at start (sp.seed) */
    char *owned[TS_CLI_MAX_STOPS + 1]; /* escaped copies of the prompt and stop strings */
    int n_owned;
} ts_cli_args;

typedef struct ts_cli_spec {
    const char *cmd;          /* "run", for messages */
    unsigned groups;          /* TS_ARGS_* */
    const struct option *own; /* the command's options (val ≥ TS_ARGS_OWN, or a letter listed in
                                 own_short), ending with a zeroed entry; may be NULL */
    const char *own_short;    /* getopt letters of the command's own short options ("p:n:"), or "" */
    /* A command option: 0, or −1 after printing a message. arg is NULL for flags. */
    int (*own_cb)(void *ctx, int id, const char *arg);
    void *ctx;
} ts_cli_spec;

/* Sets the defaults (the caller then overrides n_predict, n_ctx, ... before parsing). */
void ts_cli_args_init(ts_cli_args *a);
/* 0: parsed; 1: --help was asked (the caller prints its usage, exits 0); −1: a message is on
 * stderr (the caller prints its usage, exits 2). Applies -t to OpenMP and resolves --backend. */
int ts_cli_parse(int argc, char **argv, const ts_cli_spec *spec, ts_cli_args *a);
void ts_cli_args_free(ts_cli_args *a);
/* The help lines of the shared options of these groups. */
void ts_cli_args_help(FILE *f, unsigned groups);

/* *value lowered to limit when above it, with a warning on stderr that names the flag; returns
 * whether it was capped. Callers use it for every value they lower. */
bool ts_cli_cap(const char *cmd, const char *flag, long *value, long limit, const char *why);
/* The micro-batch to ask a session for (ts_session_params.ubatch): -ub as given (capped to -b when
 * both are given, with a warning); else 0, the backend's choice, or -b when -b alone asks for fewer
 * rows than that choice can be. */
long ts_cli_ubatch(const char *cmd, const ts_cli_args *a);

/* The whole of a file, or of stdin for "-" (*n bytes, NUL-terminated); NULL with a sentence. */
char *ts_cli_read_text(const char *path, size_t *n, char *err, size_t errlen);

/* llama.cpp's escapes in place: \n \r \t \' \" \\ \xHH; any other backslash stays as written. */
void ts_cli_unescape(char *s);

/* A strictly parsed integer / float in [lo, hi]; 0 or −1. */
int ts_cli_long(const char *s, long lo, long hi, long *v);
int ts_cli_float(const char *s, float lo, float hi, float *v);

/* s as a JSON string to f, quoted, '"' and '\\' escaped, control bytes as \u00XX (a model path may hold
 * anything). */
void ts_cli_json_str(FILE *f, const char *s);

#endif
