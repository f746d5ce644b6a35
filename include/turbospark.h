/* turbospark: the public C API.
 *
 * Boundary: a ts_model is a loaded, validated GGUF file (read-only, shareable between sessions);
 * a ts_session is one sequence's state (caches, recurrent states, n-gram context), sized once at
 * creation for its context length, so decoding allocates nothing. Sessions of one model may run
 * in one batched call (continuous batching) and are independent otherwise.
 *
 * Errors: every function that can fail returns 0 on success or −1 and writes one sentence into
 * (err, errlen) — what was wrong, where, and what was expected. err may be NULL.
 *
 * Threads: a model may be used by several sessions; one session is used by one thread at a time.
 * Memory: the model maps its file and keeps its tokenizer; each session owns its state
 * (ts_session_state_bytes).
 *
 * Scope: everything `turbospark serve` and the commands that run the model use — models, sessions
 * and their states, backends, tokenizers, chat rendering, sampling and the pieces of text
 * generation (stop strings, reasoning, tool calls, grammars). */
#ifndef TURBOSPARK_H
#define TURBOSPARK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_model ts_model;
typedef struct ts_session ts_session;

/* Opens and binds a qwen4exp GGUF (docs/MODEL.md: every key and tensor is checked before use), and
 * reads its tokenizer and recommended sampling once (ts_model_tokenizer, ts_model_sampling). */
int ts_model_load(const char *path, ts_model **out, char *err, size_t errlen);
void ts_model_free(ts_model *m);

/* Vocabulary size (rows of the logits) and the trained context length. */
int32_t ts_model_n_vocab(const ts_model *m);
int64_t ts_model_n_ctx_train(const ts_model *m);
/* Parameters (elements of every tensor) and the bytes of their data in the file. */
uint64_t ts_model_n_params(const ts_model *m);
uint64_t ts_model_size_bytes(const ts_model *m);

typedef enum ts_backend {
    TS_BACKEND_CPU = 0,  /* fp32 forward on the CPU (src/cpu) */
    TS_BACKEND_CUDA = 1, /* one CUDA GPU (src/cuda); the model is uploaded by ts_model_cuda_init */
} ts_backend;

/* Whether this build has the CUDA backend (a GPU may still be missing at run time). */
bool ts_have_cuda(void);

typedef enum ts_ple_placement {
    TS_PLE_AUTO = 0, /* on the GPU when everything fits with a margin, else pinned host memory */
    TS_PLE_DEVICE,   /* on the GPU */
    TS_PLE_HOST,     /* pinned host memory, read by the GPU through the mapping */
} ts_ple_placement;

typedef struct ts_cuda_params {
    int device;            /* CUDA device index */
    ts_ple_placement ple;  /* where the n-gram PLE table lives */
    int64_t plan_ctx;      /* context per sequence the memory plan reserves for; ≥ 1 */
    int plan_seqs;         /* sequences the plan reserves for; ≥ 1 */
    int64_t max_rows;      /* rows (tokens) per micro-batch: prefill chunk and decode batch; ≥ 1 */
    int64_t min_rows;      /* 0: max_rows as given; else the backend halves max_rows, not below
                              min_rows, until the memory plan's workspaces fit the GPU (the rows
                              chosen: ts_backend_info.max_rows) */
    bool progress;         /* an upload progress bar on stderr */
    bool random_weights;   /* benchmarks on synthetic files: every weight filled with random valid
                              blocks on the GPU instead of the file's bytes */
    uint64_t gpu_mem;      /* 0: the whole GPU; else act as a GPU of this many bytes: the backend
                               holds the rest of the device's memory unused for its lifetime, so the
                               plan and every allocation see only this much (a smaller card on a
                               larger one, measured rather than computed) */
    size_t snapshot_bytes; /* GPU memory reserved for snapshots kept on the device
                              (ts_session_snapshot_device), in bytes, part of the memory plan; 0: none */
} ts_cuda_params;

/* What a backend of a model holds, once set up (by ts_model_cuda_init or its first session). */
typedef struct ts_backend_info {
    ts_backend backend;
    char device[128];         /* "CPU", or the GPU's name */
    uint64_t weight_bytes;    /* device bytes of the weights (0 on the CPU: read in place from the file) */
    uint64_t table_bytes;     /* bytes of the PLE n-gram table on the device or pinned (0 on the CPU) */
    bool table_on_host;       /* the table is in pinned host memory */
    uint64_t work_bytes;      /* workspaces the backend's sequences share (0 on the CPU: per session) */
    uint64_t seq_state_bytes; /* one sequence's state at the planned context (0 on the CPU) */
    int64_t max_rows;         /* rows a micro-batch of the backend's context (0 on the CPU: per session) */
    uint64_t free_bytes, total_bytes; /* the GPU's memory when the plan was made (0 on the CPU) */
    uint64_t snapshot_bytes;          /* GPU memory reserved for snapshots (ts_cuda_params; 0 on the CPU) */
    uint64_t snapshot_used_bytes;     /* of which snapshots hold now (their sizes rounded up to 256) */
    uint64_t snapshot_count;          /* snapshots in that memory now */
} ts_backend_info;

/* Fills *out; refuses a backend the model has not set up (or this build lacks). */
int ts_model_backend_info(const ts_model *m, ts_backend b, ts_backend_info *out, char *err, size_t errlen);
/* Whether the model's backend b is set up (ts_model_cuda_init or a first session made it). */
bool ts_model_backend_ready(const ts_model *m, ts_backend b);
/* Measures the read bandwidth (bytes/s) of the memory that backend b reads the weights from (a
 * streaming read much larger than the caches: about a second). CUDA must be set up first. */
int ts_model_measure_bandwidth(ts_model *m, ts_backend b, double *bytes_per_s, char *err, size_t errlen);

/* Benchmarks: where the time of one decode step of session s goes (CUDA only). The session consumes
 * token id (it advances by one); names[k] (a block kind: "embed", "moe", ...) and ms[k] (its GPU
 * time, blocks timed one by one) for k < the returned count, or −1 with err. */
#define TS_PROFILE_MAX_KINDS 16
int ts_session_profile_step(ts_session *s, int32_t id, const char *names[TS_PROFILE_MAX_KINDS],
                            double ms[TS_PROFILE_MAX_KINDS], char *err, size_t errlen);
/* The same for one decode step of n_seq ≥ 1 sessions together (a batch as ts_batch_eval takes it:
 * one model and backend, each session once), session i consuming ids[i]. */
int ts_batch_profile_step(ts_session *const *s, const int32_t *ids, int n_seq,
                          const char *names[TS_PROFILE_MAX_KINDS], double ms[TS_PROFILE_MAX_KINDS], char *err,
                          size_t errlen);

/* Bytes one decode step must move (the floor of a step's time is their sum over the bandwidth):
 * every dense weight once, the expected union of the experts that `batch` sequences route to, their
 * embedding and PLE rows, recurrent state read and written, and K/V and indexer keys read at
 * context ctx (kv_value_bytes: a K/V cache value's bytes, 4 for the CPU's fp32 caches, 2 for the CUDA
 * backend's fp16 records, whose scale adds 16 bytes a position and kv head, not counted; the indexer
 * keys are fp32). */
typedef struct ts_decode_cost {
    uint64_t weight_bytes; /* quantized weights read */
    uint64_t state_bytes;  /* GDN state read + write, PLE/conv histories */
    uint64_t kv_bytes;     /* K/V and indexer keys read at ctx */
} ts_decode_cost;
ts_decode_cost ts_model_decode_cost_batch(const ts_model *m, int64_t ctx, int kv_value_bytes, int64_t batch);

/* Plans GPU memory (refusing with the numbers when the model does not fit), then uploads the
 * weights in their file encoding. Sessions created afterwards with TS_BACKEND_CUDA run there; a
 * CUDA session created before this call sets the backend up with defaults from its own params. */
int ts_model_cuda_init(ts_model *m, const ts_cuda_params *p, char *err, size_t errlen);

/* The micro-batch of a session whose params say ubatch 0 (prefill at 8,192 tokens on an H200: 1,795
 * tokens/s at 512 rows, 3,228 at 4,096, docs/BENCHMARKS.md run 36). */
#define TS_UBATCH_AUTO_CPU 512
#define TS_UBATCH_AUTO_CUDA 4096

typedef struct ts_session_params {
    int64_t n_ctx;      /* tokens the session can hold (prompt + generated); ≥ 1 */
    int64_t ubatch;     /* largest chunk one forward call processes (prefill micro-batch); ≥ 1, or
                           0: the backend's choice (TS_UBATCH_AUTO_CPU rows on the CPU; on CUDA
                           TS_UBATCH_AUTO_CUDA, halved down to TS_UBATCH_AUTO_CPU while the memory plan
                           does not fit the GPU) */
    ts_backend backend; /* where the session's state lives and its forward runs (0: CPU) */
} ts_session_params;

int ts_session_new(ts_model *m, const ts_session_params *p, ts_session **out, char *err, size_t errlen);
void ts_session_free(ts_session *s);
void ts_session_reset(ts_session *s);               /* back to an empty sequence */
int64_t ts_session_pos(const ts_session *s);        /* tokens consumed so far */
ts_backend ts_session_backend(const ts_session *s); /* where its state lives and its forward runs */
int64_t ts_session_n_ctx(const ts_session *s);      /* tokens it can hold */
int64_t ts_session_ubatch(const ts_session *s);     /* its micro-batch, after the backend's choice */
size_t ts_session_state_bytes(const ts_session *s); /* state + workspaces, fixed at creation */

/* Makes dst hold the sequence src holds (every cache and recurrent state up to its position), as if
 * dst had evaluated the same tokens: several continuations of one prompt evaluated once. Both
 * sessions are of one model and backend, and dst's context holds src's tokens. On the CUDA backend
 * the copy is device to device. */
int ts_session_copy(ts_session *dst, const ts_session *src, char *err, size_t errlen);

/* A snapshot: a sequence's whole state at its current position, packed (position-indexed caches up
 * to that position only), kept apart from any session, e.g. in a prefix cache. Restoring it into a
 * session of the same model (whose context holds its tokens) gives that session exactly the state
 * the snapshotted one had: the state is copied byte for byte, wherever it is kept.
 *
 * Where the state is kept (ts_snapshot_place):
 *   TS_SNAPSHOT_HOST    host memory: ts_session_snapshot (a CUDA session's state copied from the
 *                       GPU, and back on a restore), ts_snapshot_decode, or a device snapshot moved
 *                       by ts_snapshot_to_host (then pinned memory: fast copies back to the GPU);
 *   TS_SNAPSHOT_DEVICE  the GPU memory the model's CUDA backend reserved for snapshots
 *                       (ts_cuda_params.snapshot_bytes): ts_session_snapshot_device; taking and
 *                       restoring one are device-to-device copies.
 * A device snapshot must be freed before its model. */
typedef struct ts_snapshot ts_snapshot;
typedef enum ts_snapshot_place { TS_SNAPSHOT_HOST = 0, TS_SNAPSHOT_DEVICE = 1 } ts_snapshot_place;
int ts_session_snapshot(const ts_session *s, ts_snapshot **out, char *err, size_t errlen);
/* What ts_snapshot_bytes would say of a snapshot of s taken now in host memory, without taking it (0
 * where the backend takes none): a caller with a budget can leave out one that cannot fit. */
size_t ts_session_snapshot_bytes(const ts_session *s);
/* A snapshot of s in the GPU memory reserved for snapshots (CUDA sessions only). Refused with a
 * sentence on another backend, without a reservation, or when no free block of the reservation is
 * large enough for it (ts_session_snapshot_fits_device tells beforehand). */
int ts_session_snapshot_device(const ts_session *s, ts_snapshot **out, char *err, size_t errlen);
/* Whether ts_session_snapshot_device(s) would find room now. */
bool ts_session_snapshot_fits_device(const ts_session *s);
int ts_session_restore(ts_session *s, const ts_snapshot *snap, char *err, size_t errlen);
int64_t ts_snapshot_pos(const ts_snapshot *snap);
ts_snapshot_place ts_snapshot_where(const ts_snapshot *snap);
/* Bytes of host memory the snapshot holds: its header, and its state when that is in host memory. */
size_t ts_snapshot_bytes(const ts_snapshot *snap);
/* Bytes of its state in GPU memory (0 for a host snapshot): ts_snapshot_bytes + this is what
 * ts_snapshot_bytes says once the snapshot is moved to host memory. */
size_t ts_snapshot_device_bytes(const ts_snapshot *snap);
/* Moves a device snapshot's state to pinned host memory (a device-to-host copy) and gives its GPU
 * memory back; a host snapshot is left as it is. On failure (pinned memory refused, a copy failed)
 * the snapshot is unchanged. */
int ts_snapshot_to_host(ts_snapshot *snap, char *err, size_t errlen);
void ts_snapshot_free(ts_snapshot *snap);
/* A snapshot as bytes, for a file or another process: *data (malloc'd, *size bytes; the caller
 * frees it) holds a header (format version, backend, position, a fingerprint of the model's
 * tensors: names, types and shapes) and the state (copied from the GPU for a device snapshot). */
int ts_snapshot_encode(const ts_snapshot *snap, void **data, size_t *size, char *err, size_t errlen);
/* The inverse, for model m: refuses, with a sentence, bytes of another format, model or size. */
int ts_snapshot_decode(const ts_model *m, const void *data, size_t size, ts_snapshot **out, char *err,
                       size_t errlen);
/* The session's state to a file (written whole to path.tmp, then renamed), and back. */
int ts_session_save_file(const ts_session *s, const char *path, char *err, size_t errlen);
int ts_session_load_file(ts_session *s, const char *path, char *err, size_t errlen);

/* Feeds n tokens (any n ≥ 1: longer inputs are split into ubatch chunks) and writes the logits of
 * the last token into logits[n_vocab] (or of every token into logits[n × n_vocab] when all is
 * true; logits may be NULL). Refuses ids outside the vocabulary and inputs past n_ctx. */
int ts_session_eval(ts_session *s, const int32_t *ids, int64_t n, float *logits, bool all, char *err,
                    size_t errlen);

/* One batched step over several sessions of the same model: session i consumes ids[i][0..n[i])
 * and gets the logits of its last token in logits[i][n_vocab] (logits or logits[i] may be NULL).
 * Equivalent to calling ts_session_eval on each, up to rounding: the sessions run together in
 * batched forwards (on the CUDA backend, one token each: one captured graph). On the CPU backend
 * the entries are packed in order into micro-batches of at most U tokens in all, every weight
 * read once per micro-batch; an entry longer than the room left continues in the next one. They
 * run in the workspaces of the session with the largest n_ctx (the first such), and U is its
 * ubatch. Sessions of a batch share one backend and appear once each. Everything is checked before
 * anything runs: a refused batch leaves every session as it was. */
int ts_batch_eval(ts_session *const *s, const int32_t *const *ids, const int64_t *n, float *const *logits,
                  int n_seq, char *err, size_t errlen);

/* ---- errors ------------------------------------------------------------------------------- */

/* Formats one sentence into (err, errlen) (truncated to fit; err may be NULL) and returns −1: the
 * convention of every function here, for callers that follow it too. */
int ts_errf(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- version ------------------------------------------------------------------------------ */

const char *ts_version(void);      /* "0.1.0": the CMake project version */
const char *ts_build_commit(void); /* the git commit built ("c7589b2", "-dirty" when changed), or "unknown" */

/* ---- tokenizer ---------------------------------------------------------------------------- */

/* The byte-level BPE tokenizer of a model file (its tokenizer.ggml.* keys). Immutable once loaded:
 * several threads may use one at once. About 100 bytes a vocabulary entry. */
typedef struct ts_tokenizer ts_tokenizer;

/* The model's own tokenizer, read from its file once, when the model was loaded: *out is owned by
 * the model (valid while it lives; not to be freed). A model whose file has no usable tokenizer
 * still evaluates token ids; here it is refused with a sentence that says why (*out NULL). */
int ts_model_tokenizer(const ts_model *m, const ts_tokenizer **out, char *err, size_t errlen);
/* The tokenizer of any GGUF file with tokenizer.ggml.* keys (a model, or a vocabulary-only file). */
int ts_tokenizer_load_gguf(const char *path, ts_tokenizer **out, char *err, size_t errlen);
/* The tokenizer of a Hugging Face folder (tokenizer.json; tokenizer_config.json and config.json when
 * present), read as `turbospark convert` writes it into a GGUF, ids for ids. */
int ts_tokenizer_load_hf(const char *hf_dir, ts_tokenizer **out, char *err, size_t errlen);
void ts_tokenizer_free(ts_tokenizer *t);
int32_t ts_tokenizer_n_tokens(const ts_tokenizer *t);
int32_t ts_tokenizer_bos(const ts_tokenizer *t);  /* −1 when the file has none */
bool ts_tokenizer_add_bos(const ts_tokenizer *t); /* whether prompts start with it */
/* The id of the token whose text in the file is `text` ("<|im_end|>", "</think>"), or −1. */
int32_t ts_tokenizer_find(const ts_tokenizer *t, const char *text);
/* The file's chat template (Jinja text, tokenizer.chat_template), or NULL. */
const char *ts_tokenizer_chat_template(const ts_tokenizer *t);

/* Encodes text[0..len) (any bytes; invalid UTF-8 becomes U+FFFD) into ids[0..cap) and returns the
 * number of tokens, which may exceed cap (then only the first cap are written: call again with a
 * larger array), or −1 with err. parse_special: "<|im_start|>" written in the text becomes its id.
 * No BOS is added (the Qwen files have none). */
int64_t ts_tokenizer_encode(const ts_tokenizer *t, const char *text, size_t len, bool parse_special,
                            int32_t *ids, int64_t cap, char *err, size_t errlen);
/* The bytes of one token (*len of them; possibly part of a UTF-8 character); special: render
 * control tokens' text. NULL with *len 0 for an id out of range. Valid while t lives. */
const char *ts_token_bytes(const ts_tokenizer *t, int32_t id, bool special, size_t *len);
/* Whether id ends a generation (eos, <|im_end|>, <|endoftext|>, ...). */
bool ts_tokenizer_is_eog(const ts_tokenizer *t, int32_t id);

/* A growable byte string, NUL-terminated once non-empty (s may hold NUL bytes: use n). Starts
 * zeroed ({0}); the functions below that produce text APPEND to one. */
typedef struct ts_text {
    char *s;
    size_t n, cap;
} ts_text;
int ts_text_append(ts_text *t, const void *data, size_t n); /* 0 or −1 (out of memory) */
void ts_text_free(ts_text *t);

/* A growable list of token ids; starts zeroed. */
typedef struct ts_tokens {
    int32_t *ids;
    size_t n, cap;
} ts_tokens;
int ts_tokens_push(ts_tokens *v, int32_t id); /* 0 or −1 (out of memory) */
void ts_tokens_free(ts_tokens *v);

/* ts_tokenizer_encode into a growable list: APPENDS the ids of text[0..len) to out. */
int ts_tokenize(const ts_tokenizer *t, const char *text, size_t len, bool parse_special, ts_tokens *out,
                char *err, size_t errlen);
/* APPENDS the bytes of ids (raw: a cut inside a character leaves a partial UTF-8 sequence; text
 * shown to people goes through ts_detok). Fails on an id out of range. */
int ts_detokenize(const ts_tokenizer *t, const int32_t *ids, size_t n, bool special, ts_text *out, char *err,
                  size_t errlen);
/* APPENDS s[0..n) with every maximal invalid UTF-8 subpart replaced by U+FFFD (as Python's
 * errors='replace'); returns the number of replacements, or −1 when out of memory. */
long ts_utf8_sanitize(const char *s, size_t n, ts_text *out);

/* Streaming detokenizer: ids one at a time; what it appends is always valid UTF-8 (the bytes of a
 * character split across tokens are held until it is complete; bytes that can never complete one
 * become U+FFFD). Flush at the end (an incomplete tail becomes U+FFFD). The fields are its own. */
typedef struct ts_detok {
    const ts_tokenizer *t;
    bool special;
    unsigned char held[4];
    int n_held;
} ts_detok;
void ts_detok_init(ts_detok *d, const ts_tokenizer *t, bool special);
int ts_detok_push(ts_detok *d, int32_t id, ts_text *out, char *err, size_t errlen);
int ts_detok_push_bytes(ts_detok *d, const void *bytes, size_t n, ts_text *out); /* 0 or −1 (out of memory) */
int ts_detok_flush(ts_detok *d, ts_text *out);

/* ---- chat --------------------------------------------------------------------------------- */

/* The chat template of a tokenizer, chosen once: template_name (NULL or "": none asked) a built-in
 * rendering, "chatml", "qwen3" or "qwen3-thinking"; else, with use_jinja, template_file (a Jinja file;
 * NULL: none) or the tokenizer's own template rendered by the Jinja engine as transformers'
 * apply_chat_template does; else the built-in rendering recognised from the tokenizer's template.
 * note (may be NULL) gets a sentence worth logging when the file's template was set aside, else "".
 * Refuses, with a sentence naming the --chat-template override, what it cannot render. */
typedef struct ts_chat ts_chat;
int ts_chat_new(const ts_tokenizer *t, const char *template_name, const char *template_file, bool use_jinja,
                ts_chat **out, char *note, size_t notelen, char *err, size_t errlen);
void ts_chat_free(ts_chat *c);
const char *ts_chat_name(const ts_chat *c); /* "jinja", or the built-in rendering's name */

/* Renders a conversation as the model's prompt text. messages_json: a JSON array of OpenAI chat
 * messages ({"role", "content" (a string, null, or text parts joined by newlines),
 * "reasoning_content", "tool_calls": [{"function": {"name", "arguments"}}]}); tools_json: NULL,
 * "null" or a JSON array of tools; kwargs_json: NULL or a JSON object of template variables
 * (enable_thinking, and any other a Jinja template reads). *out gets the malloc'd NUL-terminated
 * text (the caller frees it), *len its bytes (len may be NULL). A ts_chat may render for several
 * threads at once. */
int ts_chat_apply(const ts_chat *c, const char *messages_json, const char *tools_json,
                  const char *kwargs_json, bool add_generation_prompt, char **out, size_t *len, char *err,
                  size_t errlen);

/* ---- JSON text: strings checked before cJSON reads them ----------------------------------- */

/* cJSON (1.7) decodes a JSON string into a NUL-terminated C string, so everything that reads
 * `valuestring` stops at the escape \u0000 and silently loses the rest ("abc\u0000def" reads
 * "abc"; a key "stream\u0000x" reads "stream"). It also reads a \u escape whose four characters
 * are not all hex digits as \u0000, and copies a string's raw bytes without a UTF-8 check.
 * ts_json_check scans the text once, allocating nothing, and reports the first string, value or
 * key, that would be read wrongly or that is not Unicode text:
 *   TS_JSON_NUL         it holds \u0000 or a raw NUL byte (a string the caller carries may: below);
 *   TS_JSON_BAD_ESCAPE  a \u not followed by four hex digits, or a backslash before anything but
 *                       " \ / b f n r t u (not JSON: cJSON refuses the latter itself);
 *   TS_JSON_SURROGATE   a lone surrogate escape (\ud800 not followed by \udc00-\udfff, or
 *                       \udc00-\udfff alone): no Unicode character (cJSON refuses the whole text);
 *   TS_JSON_BAD_UTF8    raw bytes that are not well-formed UTF-8 (Unicode's Table 3-7: no overlong
 *                       forms such as C0 80, no encoded surrogates, nothing past U+10FFFF, no cut
 *                       sequence); JSON text is UTF-8 (RFC 8259 §8.1).
 * Paths name a string as OpenAI's errors do: "messages[2].content", "tools[0].function.name"; the
 * root is ""; a key that is empty or holds '.', '[', ']', '"' or a control character is written
 * ["k.e[y"], so it cannot pass for a path of plain names. Paths longer than the buffer end in "...".
 *
 * A caller that takes a string with its length lists the string's path in `carry`: that string may
 * hold \u0000, and the check hands back the raw token of the first string value at that path — the
 * one cJSON_GetObjectItemCaseSensitive finds, since it takes the first of equal keys — which
 * ts_json_decode turns into its bytes, NUL and all.
 *
 * The text need not be valid JSON otherwise: the scan follows quotes, brackets, braces, commas and
 * colons and leaves every other error (and nesting past 1,000 levels, cJSON's limit) to cJSON.
 * The server checks every request body so (its 400 names the field), and so do ts_chat_apply,
 * ts_json_schema_grammar, ts_tool_call_grammar and the tool-call parser with their JSON text. */
typedef enum ts_json_issue_kind {
    TS_JSON_OK = 0,
    TS_JSON_NUL,
    TS_JSON_BAD_ESCAPE,
    TS_JSON_SURROGATE,
    TS_JSON_BAD_UTF8,
} ts_json_issue_kind;

typedef struct ts_json_issue {
    ts_json_issue_kind kind;
    bool in_key;    /* in a key of the object at `path` (else in the string value at `path`) */
    size_t at;      /* byte offset in the text of the escape or the first bad byte */
    char esc[8];    /* TS_JSON_SURROGATE, TS_JSON_BAD_ESCAPE: the escape as written ("\ud800") */
    char path[192]; /* as above; "" for the root */
} ts_json_issue;

typedef struct ts_json_carry {
    const char *path; /* in: a string value that may hold \u0000 ("prompt", "prompt[0]") */
    const char *tok;  /* out: its raw token, between the quotes (NULL: no string value at that path) */
    size_t n;
    bool nul; /* out: the token holds \u0000 */
} ts_json_carry;

/* 0 when every string of s[0..n) is fine (carry[] filled), else 1 with *issue (the first in the
 * text). carry may be NULL when n_carry is 0. */
int ts_json_check(const char *s, size_t n, ts_json_carry *carry, int n_carry, ts_json_issue *issue);

/* Appends the bytes a checked string token (between its quotes) stands for, NUL bytes included.
 * 0, or −1 when out of memory. */
int ts_json_decode(const char *tok, size_t n, ts_text *out);

/* One sentence about the issue, for a person: "'messages[2].content' contains a NUL character
 * (\u0000), which WHO cannot carry", "'prompt' is not valid UTF-8 (byte 12): ...". Returns buf. */
const char *ts_json_issue_text(const ts_json_issue *is, const char *who, char *buf, size_t len);

/* ---- sampler ------------------------------------------------------------------------------ */

/* llama.cpp's order and meaning: penalties, temperature, top-k, top-p, min-p, then a seeded draw. */
typedef struct ts_sampler_params {
    float temperature;      /* ≤ 0: greedy */
    int32_t top_k;          /* ≤ 0: off */
    float top_p;            /* ≥ 1: off */
    float min_p;            /* ≤ 0: off */
    float repeat_penalty;   /* 1: off */
    int32_t penalty_last_n; /* tokens of history the penalties look at (0: off, −1: all kept, up to 4096) */
    float presence_penalty; /* 0: off */
    float frequency_penalty; /* 0: off */
    uint64_t seed;           /* a fixed seed reproduces a run exactly */
} ts_sampler_params;

typedef struct ts_sampler ts_sampler;

/* llama.cpp's defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties, seed 0). */
ts_sampler_params ts_sampler_default_params(void);
/* Checks the parameters (a sentence for each bad one) and allocates for n_vocab; sampling
 * allocates nothing afterwards. */
int ts_sampler_new(const ts_sampler_params *p, int32_t n_vocab, ts_sampler **out, char *err, size_t errlen);
void ts_sampler_free(ts_sampler *s);
/* The check ts_sampler_new makes, alone: 0, or −1 with a sentence for the first bad field. */
int ts_sampler_check(const ts_sampler_params *p, char *err, size_t errlen);
/* New parameters (checked as ts_sampler_new checks them), empty history, reseeded: one sampler
 * serves request after request without allocating. On failure the sampler is unchanged. */
int ts_sampler_configure(ts_sampler *s, const ts_sampler_params *p, char *err, size_t errlen);
void ts_sampler_reset(ts_sampler *s, uint64_t seed); /* clears the history, reseeds */
/* Records a token of the context (prompt or generated) for the penalties. */
void ts_sampler_accept(ts_sampler *s, int32_t token);
/* Picks the next token from logits[n_vocab] (not modified). */
int32_t ts_sampler_sample(ts_sampler *s, const float *logits);
/* The same among the tokens whose bit is set in allow[n_vocab / 32 + 1] (a ts_matcher's mask; at
 * least one must be): the others are gone after the penalties, before greedy or top-k. */
int32_t ts_sampler_sample_masked(ts_sampler *s, const float *logits, const uint32_t *allow);

#define TS_LOGPROBS_MAX_TOP 20

/* One generated token's log-probability and its most likely alternatives (ts_logprobs). */
typedef struct ts_token_logprobs {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[TS_LOGPROBS_MAX_TOP]; /* most likely first */
    float top_lp[TS_LOGPROBS_MAX_TOP];
} ts_token_logprobs;

/* Log-probabilities as OpenAI and vLLM report them by default: the log-softmax of the raw logits
 * (before penalties, temperature, truncation or a grammar's mask), its exponentials summed in double
 * precision (each within a float's rounding: a result within ~1e-6 of the exact). Returns the
 * log-probability of `chosen`; top_ids/top_lp[0 .. k) get the k most likely tokens, most likely
 * first (lowest id on ties), k ≤ TS_LOGPROBS_MAX_TOP. */
float ts_logprobs(const float *logits, int32_t n_vocab, int32_t chosen, int k, int32_t *top_ids,
                  float *top_lp);

/* The fields a model file may recommend, as indexes of ts_model_sampling's given[]. */
enum { TS_SAMPLING_TEMP, TS_SAMPLING_TOP_K, TS_SAMPLING_TOP_P, TS_SAMPLING_MIN_P, TS_SAMPLING_N_KEYS };
/* Overwrites the fields of *p that the model file recommends (general.sampling.temp, .top_k, .top_p,
 * .min_p, read as llama.cpp reads them when the model was loaded) unless given[field] is true (the
 * caller set it); given may be NULL (every recommendation is taken). */
void ts_model_sampling(const ts_model *m, ts_sampler_params *p, const bool given[TS_SAMPLING_N_KEYS]);

/* ---- text generation: stop strings, reasoning, tool calls, grammars -------------------------- */

/* The text of a generation as it grows token by token, safe to show at every moment: the
 * streaming detokenizer holds back a character split across tokens; when the text contains a stop
 * string it is cut just before the earliest one and the generation is over; until then the longest
 * tail that could still grow into a stop string is held back. out->s[0 .. ts_textgen_safe()) is
 * final. The text grows in the caller's ts_text; the stop strings are borrowed. The fields are its own. */
typedef struct ts_textgen {
    ts_detok d;
    const char *const *stops; /* n_stops non-empty strings */
    int n_stops;
    ts_text *out; /* the whole generated text (ends before the stop string once one is found) */
    size_t safe;  /* bytes of out that are final */
    bool stopped; /* a stop string was found: nothing more may be pushed */
    bool finished;
} ts_textgen;

void ts_textgen_init(ts_textgen *g, const ts_tokenizer *t, const char *const *stops, int n_stops,
                     ts_text *out);
/* Appends one token's text: 1 when the text now holds a stop string (out is cut before it, all of it
 * final), 0 when generation may go on, −1 with err (an id outside the vocabulary, out of memory). */
int ts_textgen_push(ts_textgen *g, int32_t id, char *err, size_t errlen);
/* The generation is over (end-of-generation token, length, cancel): flushes and releases everything.
 * 0 or −1 (out of memory). */
int ts_textgen_finish(ts_textgen *g);
size_t ts_textgen_safe(const ts_textgen *g); /* bytes of out that are final (may be shown) */

/* Reasoning split off the answer ("<think>…</think>answer", llama-server's deepseek format): text
 * goes in, in pieces of any size; reasoning and content grow, each only with final bytes. */
typedef enum ts_reasoning_format {
    TS_REASONING_NONE = 0,     /* the text as generated, all in content */
    TS_REASONING_DEEPSEEK = 1, /* <think> blocks split into reasoning_content */
} ts_reasoning_format;

/* "none" | "deepseek" (and "auto", llama-server's default, which is deepseek for Qwen). */
int ts_reasoning_format_from_name(const char *name, ts_reasoning_format *f, char *err, size_t errlen);

typedef struct ts_think_split { /* the fields are its own */
    int state;                  /* where the next byte goes */
    ts_text hold;               /* bytes not decided yet */
    bool answered;              /* content has started */
} ts_think_split;

void ts_think_init(ts_think_split *t, bool opened); /* opened: the prompt already opened the block */
void ts_think_free(ts_think_split *t);
int ts_think_push(ts_think_split *t, const char *s, size_t n, ts_text *reasoning,
                  ts_text *content);                                          /* 0 or −1 */
int ts_think_finish(ts_think_split *t, ts_text *reasoning, ts_text *content); /* 0 or −1 */
bool ts_think_inside(const ts_think_split *t); /* inside the block now (for callers that count thinking) */
/* Whether a rendered prompt ends inside an open <think> block (its last "<think>" is not closed). */
bool ts_prompt_opens_think(const char *prompt, size_t n);

/* Tool calls in an answer (Qwen's <tool_call> blocks, JSON or XML form), parsed into (name, JSON
 * arguments) pairs as their blocks close; the content outside the blocks comes out as it is
 * decided. */
typedef struct ts_tool_call {
    char *name;      /* owned */
    char *arguments; /* owned: a JSON object as text */
} ts_tool_call;

typedef struct ts_toolcall_parser {
    void *tools;         /* the request's tools, parsed (its own) */
    bool inside;         /* in a <tool_call> block */
    ts_text hold;        /* bytes not decided yet */
    ts_tool_call *calls; /* [n_calls] the calls so far */
    int n_calls, cap;
} ts_toolcall_parser;

/* tools_json: the request's "tools" array as JSON text (borrowed for the call), or NULL. */
int ts_toolcall_init(ts_toolcall_parser *p, const char *tools_json, char *err, size_t errlen);
void ts_toolcall_free(ts_toolcall_parser *p);
int ts_toolcall_push(ts_toolcall_parser *p, const char *s, size_t n, ts_text *content); /* 0 or −1 */
int ts_toolcall_finish(ts_toolcall_parser *p, ts_text *content);                        /* 0 or −1 */

/* Grammars constrain what may be sampled: a ts_grammar (from GBNF, a JSON schema or a request's
 * tools) is matched against a tokenizer's vocabulary (ts_grammar_vocab, once per tokenizer) by a
 * ts_matcher (one per generation), whose mask goes to ts_sampler_sample_masked. */
typedef struct ts_grammar ts_grammar;
typedef struct ts_grammar_vocab ts_grammar_vocab;
typedef struct ts_matcher ts_matcher;

/* llama.cpp's GBNF (text[0..n)); a sentence with the line and column of a mistake. */
int ts_gbnf_grammar(const char *text, size_t n, ts_grammar **out, char *err, size_t errlen);
/* The values a JSON schema (JSON text) allows; NULL: any JSON object. */
int ts_json_schema_grammar(const char *schema, ts_grammar **out, char *err, size_t errlen);
/* Qwen tool calls for the tools of tools_json (or only the one called `only`): one block at least,
 * up to 8 when parallel. */
int ts_tool_call_grammar(const char *tools_json, const char *only, bool parallel, ts_grammar **out, char *err,
                         size_t errlen);
void ts_grammar_free(ts_grammar *g);

int ts_grammar_vocab_new(const ts_tokenizer *t, ts_grammar_vocab **out, char *err, size_t errlen);
void ts_grammar_vocab_free(ts_grammar_vocab *v);

int ts_matcher_new(const ts_grammar *g, const ts_grammar_vocab *v, ts_matcher **out, char *err,
                   size_t errlen);
void ts_matcher_free(ts_matcher *m);
/* The tokens that may come next: allow[n_vocab / 32 + 1] bits. 0, or −1 with a sentence. */
int ts_matcher_mask(ts_matcher *m, uint32_t *allow, char *err, size_t errlen);
bool ts_mask_allows(const uint32_t *allow, int32_t id); /* id's bit in a mask */
/* Moves past a token (allowed by the mask). 0, or −1 with a sentence. */
int ts_matcher_accept(ts_matcher *m, int32_t id, char *err, size_t errlen);
bool ts_matcher_can_end(const ts_matcher *m);  /* the bytes so far are a whole sentence of the grammar */
bool ts_matcher_must_end(const ts_matcher *m); /* and nothing may follow */

#ifdef __cplusplus
}
#endif

#endif
