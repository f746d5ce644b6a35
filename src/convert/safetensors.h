/* safetensors reader: one .safetensors file, or a Hugging Face checkpoint directory (one
 * model.safetensors, or the shards named by model.safetensors.index.json), mapped read-only.
 *
 * Everything is validated when the checkpoint is opened, before any tensor is used: the 8-byte
 * header length against the file size (and safetensors' 100 MB header cap), the header JSON
 * (cJSON), every entry's dtype, shape and data_offsets (begin ≤ end ≤ data size, end − begin ==
 * elements × dtype size, no overflow, no two tensors overlapping), duplicate names across shards,
 * and the index's file names (plain names inside the directory) and entries (each tensor really is
 * in the shard the index names). A bad file gives one sentence naming the file, tensor and problem.
 *
 * Tensors are found by name (hash table; the released checkpoint has ~100k tensors). Data stays in
 * the mappings: read rows with ts_st_read_f32 and drop pages already consumed with ts_st_release,
 * so converting a 100 GB tensor needs bounded memory. */
#ifndef TS_CONVERT_SAFETENSORS_H
#define TS_CONVERT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_ST_MAX_DIMS 8
#define TS_ST_MAX_HEADER (100u * 1000u * 1000u) /* safetensors' own limit */

typedef enum ts_st_dtype {
    TS_ST_BOOL,
    TS_ST_U8,
    TS_ST_I8,
    TS_ST_F8_E5M2,
    TS_ST_F8_E4M3,
    TS_ST_F8_E8M0,
    TS_ST_I16,
    TS_ST_U16,
    TS_ST_F16,
    TS_ST_BF16,
    TS_ST_I32,
    TS_ST_U32,
    TS_ST_F32,
    TS_ST_I64,
    TS_ST_U64,
    TS_ST_F64,
    TS_ST_DTYPE_COUNT
} ts_st_dtype;

typedef struct ts_st_tensor {
    const char *name; /* NUL-terminated, owned by the checkpoint */
    ts_st_dtype dtype;
    uint32_t n_dims;               /* 0..TS_ST_MAX_DIMS (0 = scalar) */
    int64_t shape[TS_ST_MAX_DIMS]; /* row-major (PyTorch order): shape[n_dims−1] is contiguous */
    int64_t nelements;
    uint64_t nbytes;
    const uint8_t *data; /* inside the file's mapping (unaligned in general) */
    uint32_t file;       /* index of the file that holds it (ts_st_file_path) */
} ts_st_tensor;

typedef struct ts_st ts_st;

/* Opens one .safetensors file. Returns 0 and *out, or -1 with one sentence in err. */
int ts_st_open_file(const char *path, ts_st **out, char *err, size_t errlen);

/* Opens a checkpoint directory: model.safetensors.index.json with its shards when present, else
 * model.safetensors. */
int ts_st_open_dir(const char *dir, ts_st **out, char *err, size_t errlen);

void ts_st_close(ts_st *st);

size_t ts_st_count(const ts_st *st);
const ts_st_tensor *ts_st_at(const ts_st *st, size_t i);           /* file order, shard by shard */
const ts_st_tensor *ts_st_find(const ts_st *st, const char *name); /* NULL if absent */
const char *ts_st_file_path(const ts_st *st, uint32_t file);
uint32_t ts_st_file_count(const ts_st *st);

const char *ts_st_dtype_name(ts_st_dtype d);
size_t ts_st_dtype_size(ts_st_dtype d);
bool ts_st_dtype_is_float(ts_st_dtype d); /* F16, BF16, F32: what weights may be stored as */

/* Converts n elements starting at element `first` of a F16/BF16/F32 tensor to float (exact).
 * The caller keeps first + n ≤ nelements. */
void ts_st_read_f32(const ts_st_tensor *t, int64_t first, int64_t n, float *out);

/* Reads element i of an integer (I64, or integral F64) tensor as int64; false if not integral. */
bool ts_st_read_i64(const ts_st_tensor *t, int64_t i, int64_t *out);

/* Tells the kernel the bytes [first, first + n) elements of t are no longer needed (page cache of
 * a 100 GB tensor must not pile up in the process). Harmless to skip. */
void ts_st_release(const ts_st_tensor *t, int64_t first, int64_t n);

#endif
