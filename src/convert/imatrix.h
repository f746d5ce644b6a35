/* Importance matrices, as llama.cpp's llama-imatrix computes and stores them.
 *
 * For every weight matrix W of a block (tensor names starting "blk."), and every input column j,
 * the sum over all tokens of x_j², where x is the activation row that enters the product W·x, and
 * the number of tokens summed. A 3-D expert tensor keeps one such row of sums and one count per
 * expert, over the tokens routed to that expert only. The sums of x_j (llama.cpp's newer
 * `in_sum`) are kept too. A fused gate_up expert tensor is one entry: its gate and up halves see the
 * same input, which is counted once.
 *
 * The quantizers use sums / count (the mean of x_j² over the tokens), which is ggml's
 * `quant_weights`: the weight of column j in each block's fit. An expert that no token reached gets
 * weights of 1, as llama-quantize does.
 *
 * Files: the GGUF form of current llama.cpp (general.type "imatrix"; imatrix.datasets,
 * imatrix.chunk_count, imatrix.chunk_size; per entry F32 tensors <name>.in_sum2 [n_in, n_mat],
 * <name>.counts [1, n_mat] and <name>.in_sum [n_in, n_mat]), and the older .dat form (per entry:
 * name, ncall, and the n_mat·n_in values mean(x²)·ncall; then the chunk count and the dataset). */
#ifndef TS_CONVERT_IMATRIX_H
#define TS_CONVERT_IMATRIX_H

#include "model/qwen4exp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_imatrix_entry {
    char *name;      /* the weight tensor's name, e.g. "blk.3.ffn_down_exps.weight" */
    int64_t n_in;    /* input columns (ne0 of the weight) */
    int64_t n_mat;   /* 1, or the experts of a 3-D tensor */
    float *sum2;     /* [n_mat × n_in] Σ x² (llama.cpp accumulates in float too) */
    float *sum;      /* [n_mat × n_in] Σ x, or NULL (a .dat file, or a GGUF without in_sum) */
    int64_t *counts; /* [n_mat] tokens summed */
} ts_imatrix_entry;

typedef struct ts_imatrix {
    ts_imatrix_entry *e; /* sorted by name once written or read */
    size_t n, cap;
    char **datasets; /* the text files it was computed on */
    size_t n_datasets;
    int64_t chunk_size;  /* tokens a chunk (the context of the run) */
    int64_t chunk_count; /* chunks evaluated */
} ts_imatrix;

void ts_imatrix_free(ts_imatrix *im);

/* Evaluates ids[0..n) in chunks of n_ctx tokens (each from an empty state; at most max_chunks
 * chunks when max_chunks > 0) on the CPU backend and adds their activations to im (empty or read
 * from files of the same model). At least one whole chunk is needed. progress: a line a chunk on
 * stderr. */
int ts_imatrix_collect(ts_imatrix *im, const ts_model *m, const int32_t *ids, int64_t n, int64_t n_ctx,
                       int64_t max_chunks, const char *dataset, bool progress, char *err, size_t errlen);

/* Reads a GGUF or .dat imatrix file and adds it into im (entries of the same name must have the
 * same shape; datasets are appended). A .dat file has no chunk size: dat_chunk_size (llama.cpp
 * takes its -c) turns its means back into sums. */
int ts_imatrix_read(ts_imatrix *im, const char *path, int64_t dat_chunk_size, char *err, size_t errlen);

int ts_imatrix_write_gguf(ts_imatrix *im, const char *path, char *err, size_t errlen);
int ts_imatrix_write_dat(ts_imatrix *im, const char *path, char *err, size_t errlen);

/* The entry of a weight tensor's name, or NULL. */
const ts_imatrix_entry *ts_imatrix_find(const ts_imatrix *im, const char *name);

/* Whether e fits a weight of n_mat matrices of ne0 columns (a .dat entry holds the experts of a
 * 3-D tensor as one row of n_mat · ne0 values). */
bool ts_imatrix_fits(const ts_imatrix_entry *e, int64_t ne0, int64_t n_mat);

/* The quantization weights of matrix m of such a weight (ne0 floats): sum2 / count, or all 1 where
 * the count is 0. */
void ts_imatrix_weights(const ts_imatrix_entry *e, int64_t ne0, int64_t m, float *out);

#endif
