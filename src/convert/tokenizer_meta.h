/* Tokenizer metadata for converted files: the Hugging Face tokenizer.json (byte-level BPE) of a
 * checkpoint, with tokenizer_config.json and chat_template.jinja when present, written as the
 * tokenizer.ggml.* keys llama.cpp's converter writes for Qwen models (spec §10):
 *   model "gpt2", pre "qwen35", tokens (padded to the embedding rows with "[PAD<id>]", type
 *   UNUSED, as llama.cpp does), token_type (NORMAL, or CONTROL / USER_DEFINED for added tokens),
 *   merges ("a b"), eos / padding ids from tokenizer_config.json, bos = <|endoftext|> when the
 *   vocabulary has it (Qwen has no BOS of its own), add_bos_token, chat_template. */
#ifndef TS_CONVERT_TOKENIZER_META_H
#define TS_CONVERT_TOKENIZER_META_H

#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Adds the keys to w when hf_dir has a tokenizer.json (*written says whether it had); a vocabulary
 * larger than n_vocab, or a tokenizer that is not byte-level BPE, is refused with a sentence. */
int ts_tokenizer_meta_write(const char *hf_dir, uint32_t n_vocab, ts_gguf_writer *w, bool *written, char *err,
                            size_t errlen);

#endif
