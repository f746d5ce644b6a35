/* CUDA device discovery (C interface of src/cuda/cuda_device.cu). */
#ifndef TS_CUDA_DEVICE_H
#define TS_CUDA_DEVICE_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Prints the CUDA devices the runtime sees; -1 with err when there is none or no driver. */
int ts_cuda_list_devices(FILE *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
