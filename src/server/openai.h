/* The OpenAI protocol: request bodies in, response bodies out. No sockets here, so every rule is
 * unit-tested (tests/unit/test_server_api.c).
 *
 * Requests (POST /v1/chat/completions and /v1/completions) are checked field by field; a bad one
 * gets a ts_api_error naming the field (`param`) and what was expected. Fields that would change
 * the answer but that this server does not implement are refused by name rather than ignored:
 * best_of > 1, the legacy functions / function_call, logit_bias, echo, suffix,
 * audio output, and image / audio / video / file content parts (the engine loads the text model
 * only). Unknown fields are ignored, as most servers do. `null` means "not given".
 *
 * Supported: messages (system, developer = system, user, assistant with reasoning_content, tool;
 * content as a string or an array of text parts), prompt (a string, or token ids; a one-element
 * array of either), max_tokens / max_completion_tokens, temperature, top_p, top_k, min_p, seed,
 * stop (string or array), presence_penalty, frequency_penalty, repetition_penalty (alias
 * repeat_penalty), repeat_last_n, stream, stream_options.include_usage, ignore_eos, cache_prompt,
 * chat_template_kwargs.enable_thinking, tools (functions), tool_choice (auto, none, required, or
 * {"type": "function", "function": {"name"}}), parallel_tool_calls, assistant messages with
 * tool_calls, tool messages (tool_call_id), response_format text / json_object / json_schema
 * (the schema is checked when it is compiled: json_schema.h), and llama-server's grammar (GBNF,
 * gbnf.h) and top-level json_schema on both endpoints; n (1 to TS_API_MAX_CHOICES choices);
 * logprobs (chat: true, with top_logprobs 0 to 20; completions: 0 to 20).
 *
 * Strings: every string of a body, keys and fields the server ignores included, is checked before
 * cJSON reads it (ts_json_check in turbospark.h). cJSON ends a C string at \u0000, so a NUL is refused with a
 * 400 naming the field ("'messages[2].content' contains a NUL character (\u0000), which this server
 * cannot carry"), except in the two texts that go to the tokenizer with their length, a completion's
 * prompt and /tokenize's content, which carry it whole. Lone surrogate escapes and raw bytes that are
 * not UTF-8 are refused the same way (code invalid_value); a \u escape without four hex digits is
 * invalid JSON.
 *
 * Responses are written by hand with a JSON string escaper (generated text may hold any valid
 * UTF-8, NUL included). */
#ifndef TS_SERVER_OPENAI_H
#define TS_SERVER_OPENAI_H

#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_API_MAX_STOPS 16
#define TS_API_MAX_STOP_BYTES 512
#define TS_API_MAX_CHOICES 16

typedef enum ts_api_kind { TS_API_CHAT, TS_API_COMPLETION } ts_api_kind;

/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with an HTTP status. */
typedef struct ts_api_error {
    int status;       /* 400, 401, 404, 405, 413, 500, 503 */
    const char *type; /* "invalid_request_error", "authentication_error", "server_error", ... */
    char param[96];   /* the offending field ("messages[1].content[0].type"), or "" for null */
    const char *code; /* a stable code ("invalid_type", "unsupported_parameter", ...) or NULL */
    char message[512];
} ts_api_error;

/* Fills e and returns −1 (so parsers can `return api_err(...)`). param may be NULL. */
int ts_api_fail(ts_api_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

typedef enum ts_api_tool_choice {
    TS_TOOLS_AUTO = 0, /* the model may call a tool */
    TS_TOOLS_NONE,     /* tools are not shown and calls are not parsed */
    TS_TOOLS_REQUIRED, /* one call at least (grammar-constrained) */
    TS_TOOLS_NAMED,    /* a call of tool_name (grammar-constrained) */
} ts_api_tool_choice;

typedef enum ts_api_format { TS_FORMAT_TEXT = 0, TS_FORMAT_JSON_OBJECT, TS_FORMAT_JSON_SCHEMA } ts_api_format;

typedef struct ts_api_request {
    ts_api_kind kind;
    char *model; /* as given, or NULL */
    /* chat */
    char *messages_json; /* the messages checked and normalized for ts_chat_apply (roles canonical,
                            content a string, reasoning_content and tool calls kept) */
    size_t n_msgs;
    int enable_thinking;        /* −1: the template's default */
    bool add_generation_prompt; /* true unless the request says otherwise */
    char *template_kwargs;      /* chat_template_kwargs as JSON text (Jinja templates), or NULL */
    /* completion: text or token ids */
    char *prompt;
    size_t prompt_len;
    ts_tokens prompt_ids;
    bool prompt_is_ids;
    /* both */
    int64_t max_tokens; /* −1: not given (the rest of the context) */
    ts_sampler_params sp;
    bool sp_given[TS_SAMPLING_N_KEYS]; /* temperature, top_k, top_p, min_p given explicitly */
    bool seed_given;
    char *stops[TS_API_MAX_STOPS];
    int n_stops;
    bool stream, include_usage, ignore_eos, cache_prompt;
    int n_choices; /* n: 1 unless given */
    int logprobs;  /* −1: none; else log-probabilities with this many top alternatives */
    /* tools (chat) */
    char *tools_json; /* the "tools" array as JSON text, or NULL when none */
    size_t n_tools;
    ts_api_tool_choice tool_choice;
    char *tool_name;          /* TS_TOOLS_NAMED */
    bool parallel_tool_calls; /* true unless the request says otherwise */
    /* structured output */
    ts_api_format format;
    char *schema_json; /* TS_FORMAT_JSON_SCHEMA: json_schema.schema as JSON text */
    char *grammar;     /* llama-server's GBNF "grammar", or NULL */
    /* owned strings behind the pointers above */
    char **owned;
    size_t n_owned;
} ts_api_request;

/* A user-given string for an error message: at most max bytes of s, cut at a UTF-8 character
 * boundary (with "..." when cut), in buf. Messages are sanitized again when written (invalid UTF-8
 * becomes U+FFFD, control characters are escaped), so an error body is always valid UTF-8 JSON. */
const char *ts_api_clip(const char *s, size_t max, char *buf, size_t buflen);

/* Parses and checks a request body (any bytes; n bytes, need not be NUL-terminated). `defaults`
 * are the sampling settings for fields the request leaves out. 0, or −1 with e filled (status 400,
 * 413 past max_values).
 *
 * Memory: before any tree is built, the body's JSON values (strings, numbers, literals, arrays,
 * objects; keys count too) are counted by a scan that allocates nothing; a body of more than
 * max_values (0: no limit) is refused with 413. The tree then costs at most about 64 bytes a value
 * plus the body's string bytes, whatever the body holds (an 8 MiB array of token ids would
 * otherwise be ~4 M values, ~350 MB). A text prompt is r->prompt[0 .. prompt_len), which may hold
 * NUL bytes (above). */
int ts_api_parse(ts_api_kind kind, const char *body, size_t n, const ts_sampler_params *defaults,
                 size_t max_values, ts_api_request *r, ts_api_error *e);
void ts_api_request_free(ts_api_request *r);

/* llama-server's POST /tokenize body: {"content": string, "add_special": false, "parse_special":
 * true, "with_pieces": false}. *content is a copy the caller frees, n_content bytes (NUL bytes of
 * \u0000 included) and a NUL after them. 0, or −1 with e. */
typedef struct ts_api_tokenize {
    char *content;
    size_t n_content;
    bool add_special, parse_special, with_pieces;
} ts_api_tokenize;
int ts_api_parse_tokenize(const char *body, size_t n, size_t max_values, ts_api_tokenize *r, ts_api_error *e);
/* POST /detokenize: {"tokens": [ids]} into ids (each 0 .. n_vocab − 1). 0, or −1 with e. */
int ts_api_parse_detokenize(const char *body, size_t n, size_t max_values, int32_t n_vocab, ts_tokens *ids,
                            ts_api_error *e);

/* A file name for the slot directory, checked as llama.cpp's fs_validate_filename checks it: 1 to
 * 255 bytes of valid UTF-8 (no overlong forms or surrogates) without control characters (C0, DEL,
 * C1), path separators (/ and \ and their look-alikes U+2215, U+2216), U+FF0E, U+FFFD, U+FEFF or any of
 * : * ? " < > |; not starting or ending with a space, not ending with '.', holding no "..". NULL
 * when it is fine, else why not (a phrase). */
const char *ts_api_filename_problem(const char *s, size_t n);
/* llama-server's POST /slots/{id}?action=save|restore body: {"filename": name} (a name as above;
 * *filename is a copy the caller frees). 0, or −1 with e (400, param "filename"). */
int ts_api_parse_slot_file(const char *body, size_t n, size_t max_values, char **filename, ts_api_error *e);

/* Appends s[0..n) as a JSON string literal (quotes included). 0 or −1 (out of memory). */
int ts_json_string(ts_text *out, const char *s, size_t n);

/* {"error": {...}} */
int ts_api_error_json(const ts_api_error *e, ts_text *out);

typedef struct ts_api_usage {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} ts_api_usage;

/* Identity of one response: id ("chatcmpl-..."/"cmpl-..."), creation time, model name. */
typedef struct ts_api_resp {
    ts_api_kind kind;
    char id[48];
    long long created;
    const char *model;
    int logprobs;            /* −1: "logprobs": null; else how many top alternatives each token has */
    const ts_tokenizer *tok; /* the token texts of the log-probabilities */
} ts_api_resp;

/* A tool call of a response: id "call_..." and the function's name and arguments (JSON text). */
typedef struct ts_api_call {
    const char *id, *name, *arguments;
} ts_api_call;

/* What a response or a chunk carries: content (completions: the text), the reasoning, tool calls
 * (numbered from first_index in a chunk). A NULL string is absent. */
typedef struct ts_api_delta {
    const char *content;
    size_t n_content;
    const char *reasoning;
    size_t n_reasoning;
    const ts_api_call *calls;
    int n_calls, first_index;
    int index;                   /* the choice */
    const ts_token_logprobs *lp; /* the log-probabilities of this piece's tokens */
    size_t n_lp;
    int64_t text_offset; /* completions: the byte offset of the first of them in the choice's text */
} ts_api_delta;

/* The whole (non-streamed) response: n choices m[0 .. n) with their finish reasons ("stop",
 * "length" or "tool_calls"). A chat message's content is null when it is empty and there are tool
 * calls. Log-probabilities as OpenAI writes them: chat {"content": [{"token", "logprob", "bytes",
 * "top_logprobs": [...]}], "refusal": null}; completions {"tokens", "token_logprobs",
 * "top_logprobs" (one object token → logprob a token), "text_offset"}. */
int ts_api_response_json(const ts_api_resp *r, const ts_api_delta *m, const char *const *finish_reason, int n,
                         const ts_api_usage *u, ts_text *out);

/* One server-sent event "data: {chunk}\n\n" for choice d->index (0 when d is NULL). role: the
 * chat's first chunk of a choice gives the role;
 * finish_reason NULL while running; usage non-NULL only for the final usage chunk (no choices);
 * d may be NULL (an empty delta). */
int ts_api_chunk_sse(const ts_api_resp *r, bool role, const ts_api_delta *d, const char *finish_reason,
                     const ts_api_usage *u, ts_text *out);
/* The same for choice `index` with no content (a role or a finish chunk). */
int ts_api_chunk_sse_at(const ts_api_resp *r, int index, bool role, const char *finish_reason, ts_text *out);

#endif
