/* Hugging Face config.json of a transformers qwen4_exp checkpoint → qwen4exp hyperparameters, and its
 * generation_config.json → the recommended sampling (ts_hf_sampling, at the end).
 *
 * Both packagings: Qwen4ExpForConditionalGeneration (model_type "qwen4_exp", text settings nested
 * in text_config, weights under model.language_model.*) and Qwen4ExpForCausalLM (model_type
 * "qwen4_exp_text", flat, weights under model.*). Keys a config omits take transformers' defaults
 * (save_pretrained writes only the values that differ from them), from configuration_qwen4_exp.py.
 *
 * Whatever a GGUF file cannot express is refused with a sentence naming the key: an output gate
 * other than sigmoid, an activation other than silu, norm_topk_prob false, indexer_kv_heads ≠ 1,
 * more than one PLE layer, attention biases, RoPE scaling, and what transformers itself rejects. */
#ifndef TS_CONVERT_HF_CONFIG_H
#define TS_CONVERT_HF_CONFIG_H

#include "model/qwen4exp.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ts_hf_config {
    ts_hparams hp;           /* everything the GGUF metadata holds (n_mtp = 0: see ts_hf_config_set_mtp) */
    bool multimodal;         /* Qwen4ExpForConditionalGeneration packaging */
    char prefix[32];         /* "model.language_model." or "model." */
    bool tie_embeddings;     /* tie_word_embeddings of the model class's config */
    uint32_t mtp_layers;     /* mtp_num_hidden_layers (0 when absent) */
    bool has_mtp_key;        /* whether config.json sets mtp_num_hidden_layers */
    int64_t image_token_id;  /* outer image_token_id (multimodal), else −1 */
    uint64_t ple_total_rows; /* Σ head sizes (hp.ple_rows is this padded) */
    bool qsa_configured;     /* indexer_* fields set */
    char name[128];          /* a model name for general.name (from _name_or_path, else empty) */
} ts_hf_config;

/* Reads and validates path (a config.json). On success the caller frees with ts_hf_config_free. */
int ts_hf_config_read(const char *path, ts_hf_config *c, char *err, size_t errlen);
void ts_hf_config_free(ts_hf_config *c);

/* Adds n MTP blocks (QSA-shaped, compress ratio 0) after the trunk layers. */
int ts_hf_config_set_mtp(ts_hf_config *c, uint32_t n, char *err, size_t errlen);

/* generation_config.json → the general.sampling.* keys llama.cpp's converter writes from it (gguf-py's
 * Metadata.load), for the keys the file has (a null value is absent), with llama.cpp's types:
 *   sequence → .sequence (string)          top_k → .top_k (i32)            top_p → .top_p (f32)
 *   min_p → .min_p (f32)                   xtc_probability → .xtc_probability (f32)
 *   xtc_threshold → .xtc_threshold (f32)   temperature → .temp (f32)
 *   penalty_last_n → .penalty_last_n (i32) penalty_repeat → .penalty_repeat (f32)
 *   mirostat → .mirostat (i32)             mirostat_tau → .mirostat_tau (f32)
 *   mirostat_eta → .mirostat_eta (f32)
 * Its other keys (do_sample, repetition_penalty, max_new_tokens, token ids, ...) are not written, as
 * llama.cpp does not write them. A value of another JSON type, or outside its range (probabilities
 * 0..1, temperature 0..100, top_k ≥ 0, mirostat 0..2, ...: k_sampling in hf_config.c), is refused
 * with a sentence naming it. */
#define TS_HF_SAMPLING_N 12
typedef struct ts_hf_sampling {
    bool has[TS_HF_SAMPLING_N];   /* which keys the file gives, in the order above */
    double num[TS_HF_SAMPLING_N]; /* their values (every key but sequence) */
    char *sequence;               /* owned; NULL when the file has none */
} ts_hf_sampling;

/* Reads hf_dir/generation_config.json; a folder without one gives no keys. Free with
 * ts_hf_sampling_free. */
int ts_hf_sampling_read(const char *hf_dir, ts_hf_sampling *s, char *err, size_t errlen);
/* Writes the keys read, in the order above; −1 when the writer fails (ts_gguf_writer_error). */
int ts_hf_sampling_write(const ts_hf_sampling *s, ts_gguf_writer *w);
void ts_hf_sampling_free(ts_hf_sampling *s);

/* The (count)-th prime after start: transformers' _find_nth_prime_after (head sizes of the PLE table). */
uint64_t ts_nth_prime_after(uint64_t start, uint32_t count);

#endif
