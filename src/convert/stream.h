/* Streaming tensor writes for convert and quantize: rows are produced by a callback, encoded to the
 * target type in parallel (OpenMP) a chunk at a time, and appended to a GGUF writer, so memory stays
 * bounded (a few MiB a thread) whatever the tensor size. Plus the progress report on stderr. */
#ifndef TS_CONVERT_STREAM_H
#define TS_CONVERT_STREAM_H

#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

/* Progress on stderr: a redrawn bar when stderr is a terminal, else one line per 10%. */
typedef struct ts_progress {
    const char *what; /* e.g. "convert" */
    uint64_t total;   /* units (bytes written) */
    uint64_t done;
    bool tty;
    int last_decile;
    double t0, last_draw;
} ts_progress;

void ts_progress_init(ts_progress *p, const char *what, uint64_t total);
void ts_progress_add(ts_progress *p, uint64_t n, const char *label);
void ts_progress_finish(ts_progress *p);

/* Produces row r (ne0 floats) into out; scratch holds scratch_len floats for the callback's use.
 * Called concurrently from several threads. Returns 0, or -1 with err. */
typedef int (*ts_row_fn)(const void *ctx, int64_t r, float *out, float *scratch, char *err, size_t errlen);
/* Called after rows [r0, r1) were written (e.g. to drop their source pages); may be NULL. */
typedef void (*ts_rows_done_fn)(const void *ctx, int64_t r0, int64_t r1);

/* Writes `rows` rows of ne0 elements as `type` to w (the tensor's turn in declaration order).
 * name is used in messages and progress. qw: importance weights (an imatrix), NULL for none: row r
 * is quantized with the ne0 weights at qw + (r / qw_rows) · ne0 (qw_rows: rows of one matrix, so
 * every expert of a 3-D tensor has its own). */
int ts_stream_rows(ts_gguf_writer *w, const char *name, uint32_t type, int64_t ne0, int64_t rows,
                   int64_t scratch_len, ts_row_fn fn, ts_rows_done_fn done, const void *ctx, const float *qw,
                   int64_t qw_rows, ts_progress *p, char *err, size_t errlen);

/* Writes nbytes raw bytes (a tensor kept as it is), in pieces, with progress. */
int ts_stream_bytes(ts_gguf_writer *w, const char *name, const void *data, uint64_t nbytes, ts_progress *p,
                    char *err, size_t errlen);

#endif
