/* GGUF reader and writer.
 *
 * The reader maps a file (or wraps a caller's buffer) and validates ALL of it before anything is
 * used: magic, version (2 or 3), counts against the bytes left, every string and array length,
 * value and tensor types, dimensions, element and byte counts (no overflow), block-size multiples,
 * alignment, data offsets inside the file, overlapping tensors, duplicate keys and tensor names.
 * Whatever the bytes, the result is either a fully valid ts_gguf or one sentence in err naming the
 * problem and where it is. After a successful open, nothing in the file is re-read unchecked.
 *
 * Strings in the file are not NUL-terminated; the reader keeps them as (ptr, len) views into the
 * mapping (ts_gguf_str). Keys and tensor names are additionally checked to hold no NUL byte, so
 * they can be compared with C strings.
 *
 * Ownership: a ts_gguf owns its mapping and its parsed tables; views stay valid until
 * ts_gguf_close. The reader never writes to the mapping. */
#ifndef TS_GGUF_H
#define TS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_GGUF_MAGIC "GGUF"
#define TS_GGUF_DEFAULT_ALIGNMENT 32
#define TS_GGUF_MAX_DIMS 4
#define TS_GGUF_MAX_ARRAY_DEPTH 8 /* nested arrays deeper than this are refused */
#define TS_GGUF_MAX_NAME 64       /* bytes of a tensor name (the GGUF specification's limit) */

typedef enum ts_gguf_vtype {
    TS_GGUF_U8 = 0,
    TS_GGUF_I8 = 1,
    TS_GGUF_U16 = 2,
    TS_GGUF_I16 = 3,
    TS_GGUF_U32 = 4,
    TS_GGUF_I32 = 5,
    TS_GGUF_F32 = 6,
    TS_GGUF_BOOL = 7,
    TS_GGUF_STRING = 8,
    TS_GGUF_ARRAY = 9,
    TS_GGUF_U64 = 10,
    TS_GGUF_I64 = 11,
    TS_GGUF_F64 = 12,
    TS_GGUF_VTYPE_COUNT = 13,
} ts_gguf_vtype;

typedef struct ts_gguf_str {
    const char *ptr; /* not NUL-terminated */
    uint64_t len;
} ts_gguf_str;

/* One metadata value. Scalars are decoded; arrays of scalars keep a pointer to their packed
 * little-endian bytes (read elements with ts_gguf_arr_*); arrays of strings and arrays of arrays
 * are decoded into `items`. */
typedef struct ts_gguf_value {
    uint32_t type; /* ts_gguf_vtype */
    union {
        uint64_t u64; /* U8, U16, U32, U64, BOOL (0/1) */
        int64_t i64;  /* I8, I16, I32, I64 */
        double f64;   /* F32, F64 */
        ts_gguf_str str;
        struct {
            uint32_t elem_type;          /* ts_gguf_vtype of every element */
            uint64_t count;              /* number of elements */
            const uint8_t *data;         /* scalar elements: count * elem size packed bytes */
            struct ts_gguf_value *items; /* STRING or ARRAY elements: [count], else NULL */
        } arr;
    };
} ts_gguf_value;

typedef struct ts_gguf_kv {
    ts_gguf_str key;
    ts_gguf_value value;
} ts_gguf_kv;

typedef struct ts_gguf_tensor {
    ts_gguf_str name;
    uint32_t n_dims;              /* 1..4 */
    int64_t ne[TS_GGUF_MAX_DIMS]; /* elements per dim, ne[0] contiguous; unused dims are 1 */
    uint32_t type;                /* ggml type id (src/quant/quant.h) */
    uint64_t offset;              /* byte offset inside the data section */
    uint64_t nbytes;              /* bytes of data */
    int64_t nelements;
    const void *data; /* inside the mapping */
} ts_gguf_tensor;

typedef struct ts_gguf ts_gguf;

/* Opens and validates a GGUF file (read-only mmap). Returns 0 and *out, or -1 with err. */
int ts_gguf_open(const char *path, ts_gguf **out, char *err, size_t errlen);

/* Same for a buffer the caller keeps alive until ts_gguf_close (used by the fuzzer and tests).
 * `name` is used in messages. */
int ts_gguf_open_buffer(const void *data, size_t size, const char *name, ts_gguf **out, char *err,
                        size_t errlen);

void ts_gguf_close(ts_gguf *g);

uint32_t ts_gguf_version(const ts_gguf *g);
uint64_t ts_gguf_alignment(const ts_gguf *g);
uint64_t ts_gguf_file_size(const ts_gguf *g);
uint64_t ts_gguf_data_offset(const ts_gguf *g); /* start of the data section in the file */
const char *ts_gguf_path(const ts_gguf *g);

/* Metadata. */
int64_t ts_gguf_kv_count(const ts_gguf *g);
const ts_gguf_kv *ts_gguf_kv_at(const ts_gguf *g, int64_t i);
const ts_gguf_value *ts_gguf_find(const ts_gguf *g, const char *key); /* NULL if absent */

/* Typed getters: 0 on success; -1 with a sentence naming the key when it is absent or of another
 * type. Integer getters accept any integer type whose value fits the destination. */
int ts_gguf_get_u32(const ts_gguf *g, const char *key, uint32_t *v, char *err, size_t errlen);
int ts_gguf_get_u64(const ts_gguf *g, const char *key, uint64_t *v, char *err, size_t errlen);
int ts_gguf_get_i64(const ts_gguf *g, const char *key, int64_t *v, char *err, size_t errlen);
int ts_gguf_get_f32(const ts_gguf *g, const char *key, float *v, char *err, size_t errlen);
int ts_gguf_get_bool(const ts_gguf *g, const char *key, bool *v, char *err, size_t errlen);
/* Copies a string value into buf (NUL-terminated); fails if it does not fit. */
int ts_gguf_get_str(const ts_gguf *g, const char *key, char *buf, size_t buflen, char *err, size_t errlen);
/* An array value with the given element type (or any element type when elem_type < 0). */
int ts_gguf_get_arr(const ts_gguf *g, const char *key, int elem_type, const ts_gguf_value **arr, char *err,
                    size_t errlen);

/* Elements of a scalar array (unaligned-safe little-endian reads; i < count is the caller's job). */
uint64_t ts_gguf_arr_u64(const ts_gguf_value *arr, uint64_t i); /* unsigned and bool elements */
int64_t ts_gguf_arr_i64(const ts_gguf_value *arr, uint64_t i);  /* any integer element */
double ts_gguf_arr_f64(const ts_gguf_value *arr, uint64_t i);   /* F32/F64 elements */

/* Whether an integer value (scalar) is exactly representable as int64; fills *v. */
bool ts_gguf_value_as_i64(const ts_gguf_value *v, int64_t *out);

/* Tensors. */
int64_t ts_gguf_tensor_count(const ts_gguf *g);
const ts_gguf_tensor *ts_gguf_tensor_at(const ts_gguf *g, int64_t i);
const ts_gguf_tensor *ts_gguf_find_tensor(const ts_gguf *g, const char *name); /* NULL if absent */

/* Helpers. */
bool ts_gguf_str_eq(ts_gguf_str s, const char *c);
const char *ts_gguf_vtype_name(uint32_t t);
size_t ts_gguf_vtype_size(uint32_t t); /* bytes of a scalar type; 0 for STRING/ARRAY/unknown */

/* ---- Writer ----------------------------------------------------------------------------------
 * Streaming: set metadata and declare every tensor (name, type, shape) first; then
 * ts_gguf_writer_begin_data writes the header; then give each tensor's bytes in declaration order
 * (ts_gguf_writer_write in as many pieces as wanted, or ts_gguf_writer_skip to leave a hole that
 * stays sparse on disk); ts_gguf_writer_finish checks every tensor was completed and closes. */
typedef struct ts_gguf_writer ts_gguf_writer;

ts_gguf_writer *ts_gguf_writer_new(uint32_t alignment, char *err, size_t errlen);
void ts_gguf_writer_free(ts_gguf_writer *w); /* also closes an unfinished file */

/* Metadata setters (a key set twice keeps the last value). Arrays copy their data. */
int ts_gguf_writer_set_u8(ts_gguf_writer *w, const char *key, uint8_t v);
int ts_gguf_writer_set_i8(ts_gguf_writer *w, const char *key, int8_t v);
int ts_gguf_writer_set_u16(ts_gguf_writer *w, const char *key, uint16_t v);
int ts_gguf_writer_set_i16(ts_gguf_writer *w, const char *key, int16_t v);
int ts_gguf_writer_set_u32(ts_gguf_writer *w, const char *key, uint32_t v);
int ts_gguf_writer_set_i32(ts_gguf_writer *w, const char *key, int32_t v);
int ts_gguf_writer_set_u64(ts_gguf_writer *w, const char *key, uint64_t v);
int ts_gguf_writer_set_i64(ts_gguf_writer *w, const char *key, int64_t v);
int ts_gguf_writer_set_f32(ts_gguf_writer *w, const char *key, float v);
int ts_gguf_writer_set_f64(ts_gguf_writer *w, const char *key, double v);
int ts_gguf_writer_set_bool(ts_gguf_writer *w, const char *key, bool v);
int ts_gguf_writer_set_str(ts_gguf_writer *w, const char *key, const char *v);
/* Array of scalars of element type et (count elements, packed little-endian in data). */
int ts_gguf_writer_set_arr(ts_gguf_writer *w, const char *key, uint32_t et, const void *data, uint64_t count);
int ts_gguf_writer_set_arr_str(ts_gguf_writer *w, const char *key, const char *const *v, uint64_t count);
/* Copies one value (of any type, nested arrays too) from a reader, e.g. to rewrite a file. */
int ts_gguf_writer_set_value(ts_gguf_writer *w, const char *key, const ts_gguf_value *v);

/* Declares a tensor; ne[0] contiguous, n_dims 1..4. Fails (with the writer's error) on a bad shape,
 * unknown type, ragged rows or a duplicate name. */
int ts_gguf_writer_add_tensor(ts_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne);

int ts_gguf_writer_begin_data(ts_gguf_writer *w, const char *path);
int ts_gguf_writer_write(ts_gguf_writer *w, const void *data, size_t nbytes);
int ts_gguf_writer_skip(ts_gguf_writer *w, uint64_t nbytes);
int ts_gguf_writer_finish(ts_gguf_writer *w);

/* Instead of a file: a GGUF of the metadata alone (no tensors may be declared) in *data (malloc'd,
 * *size bytes; the caller frees it), e.g. for ts_gguf_open_buffer. 0, or -1 with the writer's error. */
int ts_gguf_writer_to_buffer(ts_gguf_writer *w, void **data, size_t *size);

/* The last error of the writer, as a sentence. */
const char *ts_gguf_writer_error(const ts_gguf_writer *w);

#ifdef __cplusplus
}
#endif

#endif
