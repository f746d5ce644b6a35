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

/* A switch of the environment, for comparisons and debugging: 0 when NAME is set and starts with '0',
 * else 1. Read at each call (callers that read it once cache it). */
int ts_cuda_switch_on(const char *name);

/* Multiprocessors of the current device (1 when the runtime cannot say); cached per thread and
 * device, for sizing resident grids. */
int ts_cuda_sm_count(void);

#ifdef __cplusplus
}
#endif

#endif
