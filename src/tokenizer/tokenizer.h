/* Byte-level BPE tokenizer read from GGUF metadata (tokenizer.ggml.model = "gpt2"), matching
 * Hugging Face `tokenizers` on the Qwen pipeline id for id.
 *
 * Encoding, in the order HF applies it (MODEL.md §9, docs/TOKENIZER.md):
 *   1. invalid UTF-8 is replaced by U+FFFD, one per maximal invalid subpart (what Python's
 *      bytes.decode('utf-8', errors='replace') gives: HF's Python API accepts only str);
 *   2. added tokens are split off atomically, leftmost-longest: USER_DEFINED ones always, CONTROL
 *      ones only when the caller allows specials (HF's encode_special_tokens = False);
 *   3. every other segment is NFC-normalized (utf8proc), split by the pre-tokenizer regex named by
 *      tokenizer.ggml.pre ("qwen35" or "qwen2", PCRE2 in UTF + UCP mode), and each piece is BPE-merged
 *      over bytes with HF's merge order (lowest rank first, then leftmost).
 * Decoding maps NORMAL tokens back through the GPT-2 byte map; CONTROL tokens give their text only
 * when specials are rendered; USER_DEFINED tokens give their text; UNUSED ([PADn]) give nothing.
 *
 * Ownership: a ts_tokenizer copies what it needs from the GGUF (the file may be closed after
 * loading) and is immutable afterwards, so several threads may encode/decode with it at once.
 * Memory: roughly 100 bytes a token plus 40 a merge (about 35 MiB for the released 248k vocab). */
#ifndef TS_TOKENIZER_H
#define TS_TOKENIZER_H

#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_gguf ts_gguf;
typedef struct ts_gguf_writer ts_gguf_writer;

/* Token types of tokenizer.ggml.token_type (llama.cpp's values). */
enum {
    TS_TOKEN_UNDEFINED = 0,
    TS_TOKEN_NORMAL = 1,
    TS_TOKEN_UNKNOWN = 2,
    TS_TOKEN_CONTROL = 3,
    TS_TOKEN_USER_DEFINED = 4,
    TS_TOKEN_UNUSED = 5,
    TS_TOKEN_BYTE = 6,
};

typedef struct ts_tokenizer ts_tokenizer;

/* ts_text and ts_tokens (growable bytes and ids), ts_tokenize, ts_detokenize, ts_token_bytes and the
 * streaming ts_detok: include/turbospark.h */

/* Loads the tokenizer of a GGUF file: tokenizer.ggml.{model, pre, tokens, token_type, merges} and
 * the special ids. Fails with a sentence naming the key when something is missing or unsupported. */
int ts_tokenizer_load(const ts_gguf *g, ts_tokenizer **out, char *err, size_t errlen);
void ts_tokenizer_free(ts_tokenizer *t);

int32_t ts_tokenizer_n_tokens(const ts_tokenizer *t);
const char *ts_tokenizer_pre(const ts_tokenizer *t);           /* "qwen35", "qwen2" */
const char *ts_tokenizer_chat_template(const ts_tokenizer *t); /* tokenizer.chat_template, or NULL */
int32_t ts_tokenizer_bos(const ts_tokenizer *t);               /* -1 when the file has none */
int32_t ts_tokenizer_eos(const ts_tokenizer *t);
int32_t ts_tokenizer_pad(const ts_tokenizer *t);
bool ts_tokenizer_add_bos(const ts_tokenizer *t);               /* tokenizer.ggml.add_bos_token */
int ts_tokenizer_token_type(const ts_tokenizer *t, int32_t id); /* -1 for an id out of range */
/* End of generation: eos, eot, eom and the tokens llama.cpp also treats so by their text
 * (<|im_end|>, <|endoftext|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>, ...). */
bool ts_tokenizer_is_eog(const ts_tokenizer *t, int32_t id);
/* The token's text as stored in the file (byte-level form for NORMAL tokens); *len its bytes. */
const char *ts_tokenizer_token_text(const ts_tokenizer *t, int32_t id, size_t *len);
/* The id of the token whose file text is `text` (e.g. "<|im_end|>"), or -1. */
int32_t ts_tokenizer_find(const ts_tokenizer *t, const char *text);

/* NFC of valid UTF-8 s, appended to out (exported for tests). 0 or -1 with err. */
int ts_utf8_nfc(const char *s, size_t n, ts_text *out, char *err, size_t errlen);

/* The pre-tokenizer alone (exported for tests): splits valid UTF-8 s (no normalization) with the
 * regex of `pre` ("qwen35" or "qwen2") and calls piece(ctx, start, len) for every piece, gaps
 * between matches included (HF's Split behaviour "isolated"). */
int ts_pretokenize(const char *pre, const char *s, size_t n,
                   void (*piece)(void *ctx, size_t start, size_t len), void *ctx, char *err, size_t errlen);

/* Writes the tokenizer of a Hugging Face folder into a GGUF writer, as llama.cpp's converter does
 * for Qwen (convert_hf_to_gguf.py _set_vocab_gpt2 + gguf-py SpecialVocab):
 *   tokenizer.ggml.model "gpt2"; tokenizer.ggml.pre "qwen35" or "qwen2" (from the Split regex of
 *   tokenizer.json; other pre-tokenizers are refused); tokenizer.ggml.tokens: n_vocab strings, id
 *   order, ids in neither the BPE vocabulary nor added_tokens padded as "[PAD<id>]";
 *   tokenizer.ggml.token_type: NORMAL, CONTROL (added tokens marked special, or looking like
 *   <|...|>), USER_DEFINED (other added tokens), UNUSED (padding); tokenizer.ggml.merges as "a b";
 *   the special ids bos/eos/unk/sep/pad/cls/mask from tokenizer_config.json (token strings looked
 *   up among the added tokens) then config.json's <type>_token_id for those still unset;
 *   add_bos_token / add_eos_token / add_sep_token when tokenizer_config.json has them;
 *   tokenizer.chat_template from tokenizer_config.json, else chat_template.jinja, else
 *   chat_template.json.
 * hf_dir must hold tokenizer.json (tokenizer_config.json and config.json are optional). n_vocab is
 * the model's vocabulary (rows of the embedding); 0 means the largest id + 1. */
int ts_tokenizer_write_gguf(ts_gguf_writer *w, const char *hf_dir, uint32_t n_vocab, char *err,
                            size_t errlen);

/* Writes the tokenizer of another GGUF file (every tokenizer.* key of src) into w, for a model of
 * n_vocab embedding rows (turbospark synth --tokenizer-from). The source must load as a tokenizer
 * (ts_tokenizer_load's checks). A token list shorter than n_vocab is padded, as llama.cpp's converter
 * pads one (and ts_tokenizer_write_gguf): tokens "[PAD<id>]" of type UNUSED (never produced by
 * encoding, empty when decoded), scores -1000 when the file has scores — llama.cpp takes the token
 * count as the vocabulary and wants that many embedding rows. A longer one is refused. *n_tokens:
 * the source's token count. */
int ts_tokenizer_copy_gguf(ts_gguf_writer *w, const ts_gguf *src, uint32_t n_vocab, uint32_t *n_tokens,
                           char *err, size_t errlen);

#endif
