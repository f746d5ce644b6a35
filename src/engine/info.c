/* Facts about a loaded model for the public API (include/turbospark.h). */
#include "turbospark.h"

#include "gguf/gguf.h"
#include "model/qwen4exp.h"

uint64_t ts_model_n_params(const ts_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < ts_gguf_tensor_count(m->gguf); i++)
        n += (uint64_t)ts_gguf_tensor_at(m->gguf, i)->nelements;
    return n;
}

uint64_t ts_model_size_bytes(const ts_model *m) {
    uint64_t n = 0;
    for (int64_t i = 0; i < ts_gguf_tensor_count(m->gguf); i++) n += ts_gguf_tensor_at(m->gguf, i)->nbytes;
    return n;
}
