/* Minimal .npy (NumPy format 1.0) files: float32/int32 arrays, C order, little-endian.
 * Used for --dump, logits and token files exchanged with the Python tools. */
#ifndef TS_CLI_NPY_H
#define TS_CLI_NPY_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define TS_NPY_MAX_DIMS 8

/* Writes the header of an array of `descr` ("<f4" or "<i4") with the given shape; the caller then
 * writes prod(shape) elements of data. Returns 0, or -1 with err. */
int ts_npy_write_header(FILE *f, const char *descr, int n_dims, const int64_t *shape, char *err,
                        size_t errlen);

/* Reads a whole 1-D or 2-D array of int32 ("<i4", or "<i8" values that fit) or float32 ("<f4").
 * want is 'i' (int32 out) or 'f' (float out). *data is malloc'd; the caller frees it. */
int ts_npy_read(const char *path, char want, void **data, int *n_dims, int64_t shape[TS_NPY_MAX_DIMS],
                char *err, size_t errlen);

#endif
