/* Streaming tensor writes and progress (see stream.h). */
#include "convert/stream.h"

#include "common/error.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define TS_STREAM_CHUNK (16u << 20) /* bytes of encoded rows per chunk */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ts_progress_init(ts_progress *p, const char *what, uint64_t total) {
    memset(p, 0, sizeof *p);
    p->what = what;
    p->total = total ? total : 1;
    p->tty = isatty(STDERR_FILENO) == 1;
    p->t0 = now_s();
}

static void draw(ts_progress *p, const char *label, bool force) {
    double t = now_s();
    if (!force && t - p->last_draw < 0.1) return;
    p->last_draw = t;
    double frac = (double)p->done / (double)p->total;
    if (frac > 1) frac = 1;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    double rate = t > p->t0 ? (double)p->done / (t - p->t0) / 1048576.0 : 0;
    fprintf(stderr, "\r%s [%s] %5.1f%% %8.1f MiB/s  %-40.40s", p->what, bar, 100 * frac, rate,
            label ? label : "");
    fflush(stderr);
}

void ts_progress_add(ts_progress *p, uint64_t n, const char *label) {
    p->done += n;
    if (p->tty) {
        draw(p, label, false);
        return;
    }
    int decile = (int)(10 * (double)p->done / (double)p->total);
    if (decile > 10) decile = 10;
    while (p->last_decile < decile) {
        p->last_decile++;
        fprintf(stderr, "%s: %d%% (%.1f of %.1f MiB, %.1f s)\n", p->what, 10 * p->last_decile,
                (double)p->done / 1048576.0, (double)p->total / 1048576.0, now_s() - p->t0);
    }
}

void ts_progress_finish(ts_progress *p) {
    if (p->tty) {
        draw(p, "done", true);
        fputc('\n', stderr);
    }
}

int ts_stream_rows(ts_gguf_writer *w, const char *name, uint32_t type, int64_t ne0, int64_t rows,
                   int64_t scratch_len, ts_row_fn fn, ts_rows_done_fn done, const void *ctx, const float *qw,
                   int64_t qw_rows, ts_progress *p, char *err, size_t errlen) {
    size_t rb = ts_row_size(type, ne0);
    if (!rb)
        return ts_errf(err, errlen, "tensor '%s': rows of %" PRId64 " elements cannot be stored as %s", name,
                       ne0, ts_type_name(type));
    int64_t per = (int64_t)(TS_STREAM_CHUNK / (rb > (size_t)ne0 * 4 ? rb : (size_t)ne0 * 4));
    if (per < 1) per = 1;
    if (per > rows) per = rows;
    uint8_t *buf = malloc((size_t)per * rb);
    if (!buf && rows) return ts_errf(err, errlen, "out of memory for %" PRId64 " rows of '%s'", per, name);
    int rc = 0;
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += per) {
        int64_t n = rows - r0 < per ? rows - r0 : per;
        int failed = 0;
#pragma omp parallel
        {
            float *row = malloc(((size_t)ne0 + (size_t)scratch_len + 1) * sizeof *row);
            char terr[512] = "";
            int mine = row ? 0 : -1;
            if (!row) snprintf(terr, sizeof terr, "out of memory for a row of %" PRId64 " elements", ne0);
#pragma omp for schedule(static)
            for (int64_t i = 0; i < n; i++) {
                if (mine) continue;
                mine = fn(ctx, r0 + i, row, row + ne0, terr, sizeof terr);
                const float *qwr = qw ? qw + (r0 + i) / qw_rows * ne0 : NULL;
                if (!mine)
                    mine =
                        ts_quantize_row_imatrix(type, row, buf + (size_t)i * rb, ne0, qwr, terr, sizeof terr);
            }
            if (mine) {
#pragma omp critical
                {
                    if (!failed) ts_errf(err, errlen, "tensor '%s': %s", name, terr);
                    failed = 1;
                }
            }
            free(row);
        }
        if (failed)
            rc = -1;
        else if (ts_gguf_writer_write(w, buf, (size_t)n * rb))
            rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        if (!rc && done) done(ctx, r0, r0 + n);
        if (!rc && p) ts_progress_add(p, (uint64_t)n * rb, name);
    }
    free(buf);
    return rc;
}

int ts_stream_bytes(ts_gguf_writer *w, const char *name, const void *data, uint64_t nbytes, ts_progress *p,
                    char *err, size_t errlen) {
    const uint8_t *d = data;
    for (uint64_t off = 0; off < nbytes;) {
        size_t n = nbytes - off < TS_STREAM_CHUNK ? (size_t)(nbytes - off) : TS_STREAM_CHUNK;
        if (ts_gguf_writer_write(w, d + off, n)) return ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        off += n;
        if (p) ts_progress_add(p, n, name);
    }
    return 0;
}
