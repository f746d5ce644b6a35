/* HF → GGUF: a transformers qwen4_exp checkpoint directory to a qwen4exp GGUF file (MODEL.md §3–§4),
 * and GGUF → GGUF re-quantization. Both stream tensor by tensor and row by row (bounded memory),
 * report progress on stderr, check the result binds with ts_model_load, and remove the output
 * file when anything fails. */
#ifndef TS_CONVERT_CONVERT_H
#define TS_CONVERT_CONVERT_H

#include "convert/mix.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct ts_convert_opts {
    const ts_mix *mix; /* matrix types (vectors are F32) */
    bool mtp;          /* also convert the MTP block (mtp.*) as blk.L */
    bool quiet;        /* no progress */
} ts_convert_opts;

/* Converts the checkpoint in hf_dir (config.json + safetensors) to out_path. */
int ts_convert_hf(const char *hf_dir, const char *out_path, const ts_convert_opts *o, char *err,
                  size_t errlen);

/* Re-encodes every matrix of a qwen4exp GGUF with `mix` (dequantize row → quantize row; a tensor
 * already of its target type is copied as it is), keeps vectors and all metadata. imatrix: an
 * importance matrix file (.gguf or .dat, src/convert/imatrix.h) or NULL; its weights are used for
 * the tensors it covers whose target type has a weighted quantizer (ts_can_quantize_imatrix), as
 * llama-quantize does, and the file is named in quantize.imatrix.* metadata. */
int ts_quantize_gguf(const char *in_path, const char *out_path, const ts_mix *mix, const char *imatrix,
                     bool quiet, char *err, size_t errlen);

#endif
