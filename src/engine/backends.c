/* The backends this build has (src/engine/backend.h): the CPU always, CUDA when nvcc was found. */
#include "engine/backend.h"

const ts_backend_ops *ts_backend_ops_of(ts_backend kind) {
    switch (kind) {
    case TS_BACKEND_CPU:
        return &ts_cpu_backend;
#ifdef TS_HAVE_CUDA
    case TS_BACKEND_CUDA:
        return &ts_cuda_backend;
#endif
    default:
        return NULL;
    }
}

bool ts_have_cuda(void) {
    return ts_backend_ops_of(TS_BACKEND_CUDA) != NULL;
}
