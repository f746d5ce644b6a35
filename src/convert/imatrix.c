/* Importance matrices (see imatrix.h): collection through the CPU forward's matmul hook, the
 * GGUF and .dat files of llama.cpp. */
#include "convert/imatrix.h"

#include "common/error.h"
#include "cpu/cpu.h"
#include "cpu/forward.h"
#include "gguf/gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DAT_MAX_NAME = 1024 };

void ts_imatrix_free(ts_imatrix *im) {
    for (size_t i = 0; i < im->n; i++) {
        free(im->e[i].name), free(im->e[i].sum2), free(im->e[i].sum), free(im->e[i].counts);
    }
    for (size_t i = 0; i < im->n_datasets; i++) free(im->datasets[i]);
    free(im->e), free(im->datasets);
    memset(im, 0, sizeof *im);
}

static int find_index(const ts_imatrix *im, const char *name, size_t len) {
    for (size_t i = 0; i < im->n; i++)
        if (strlen(im->e[i].name) == len && memcmp(im->e[i].name, name, len) == 0) return (int)i;
    return -1;
}

const ts_imatrix_entry *ts_imatrix_find(const ts_imatrix *im, const char *name) {
    const int i = find_index(im, name, strlen(name));
    return i < 0 ? NULL : &im->e[i];
}

/* The entry of `name` (len bytes) with shape n_in × n_mat, added (zeroed) when absent; its index,
 * or -1 with a sentence when an entry of that name has another shape or memory runs out. */
static int entry_for(ts_imatrix *im, const char *name, size_t len, int64_t n_in, int64_t n_mat, bool with_sum,
                     char *err, size_t errlen) {
    int i = find_index(im, name, len);
    if (i >= 0) {
        const ts_imatrix_entry *e = &im->e[i];
        if (e->n_in != n_in || e->n_mat != n_mat)
            return ts_errf(err, errlen,
                           "the importance data of %s is %" PRId64 " x %" PRId64 " in one source and %" PRId64
                           " x %" PRId64 " in another (not the same model?)",
                           e->name, e->n_in, e->n_mat, n_in, n_mat);
        return i;
    }
    if (im->n == im->cap) {
        const size_t cap = im->cap ? 2 * im->cap : 64;
        ts_imatrix_entry *ne = realloc(im->e, cap * sizeof *ne);
        if (!ne) return ts_errf(err, errlen, "out of memory for the importance matrix");
        im->e = ne, im->cap = cap;
    }
    ts_imatrix_entry *e = &im->e[im->n];
    memset(e, 0, sizeof *e);
    e->n_in = n_in, e->n_mat = n_mat;
    e->name = malloc(len + 1);
    e->sum2 = calloc((size_t)(n_in * n_mat), sizeof(float));
    e->sum = with_sum ? calloc((size_t)(n_in * n_mat), sizeof(float)) : NULL;
    e->counts = calloc((size_t)n_mat, sizeof(int64_t));
    if (!e->name || !e->sum2 || (with_sum && !e->sum) || !e->counts) {
        free(e->name), free(e->sum2), free(e->sum), free(e->counts);
        return ts_errf(err, errlen, "out of memory for the importance data of %.*s (%" PRId64 " floats)",
                       (int)len, name, n_in * n_mat);
    }
    memcpy(e->name, name, len);
    e->name[len] = 0;
    return (int)im->n++;
}

bool ts_imatrix_fits(const ts_imatrix_entry *e, int64_t ne0, int64_t n_mat) {
    return (e->n_in == ne0 && e->n_mat == n_mat) || (e->n_mat == 1 && e->n_in == ne0 * n_mat);
}

void ts_imatrix_weights(const ts_imatrix_entry *e, int64_t ne0, int64_t m, float *out) {
    const int64_t off = m * ne0;
    const float c = (float)e->counts[off / e->n_in];
    for (int64_t j = 0; j < ne0; j++) out[j] = c > 0 ? e->sum2[off + j] / c : 1.0f;
}

static int add_dataset(ts_imatrix *im, const char *s, size_t len, char *err, size_t errlen) {
    char **nd = realloc(im->datasets, (im->n_datasets + 1) * sizeof *nd);
    char *copy = malloc(len + 1);
    if (nd) im->datasets = nd;
    if (!nd || !copy) {
        free(copy);
        return ts_errf(err, errlen, "out of memory");
    }
    memcpy(copy, s, len);
    copy[len] = 0;
    im->datasets[im->n_datasets++] = copy;
    return 0;
}

/* ---- collection -------------------------------------------------------------------------- */

typedef struct collector {
    ts_imatrix *im;
    const ts_gguf_tensor **seen; /* tensors met so far, and their entries */
    int *seen_entry;
    size_t n_seen, cap_seen;
    int failed; /* set once: the message is in err */
    char *err;
    size_t errlen;
} collector;

static int entry_of_tensor(collector *c, const ts_gguf_tensor *W) {
    for (size_t i = 0; i < c->n_seen; i++)
        if (c->seen[i] == W) return c->seen_entry[i];
    const int64_t n_mat = W->n_dims >= 3 ? W->ne[2] : 1;
    const int i = entry_for(c->im, W->name.ptr, W->name.len, W->ne[0], n_mat, true, c->err, c->errlen);
    if (i < 0) return -1;
    if (c->n_seen == c->cap_seen) {
        const size_t cap = c->cap_seen ? 2 * c->cap_seen : 64;
        const ts_gguf_tensor **s = realloc(c->seen, cap * sizeof *s);
        if (s) c->seen = s;
        int *se = realloc(c->seen_entry, cap * sizeof *se);
        if (se) c->seen_entry = se;
        if (!s || !se) return ts_errf(c->err, c->errlen, "out of memory for the importance matrix");
        c->cap_seen = cap;
    }
    c->seen[c->n_seen] = W, c->seen_entry[c->n_seen++] = i;
    return i;
}

/* The matmul hook: x (T rows of ne0) enters W from row0. Expert e of a 3-D tensor starts at row
 * e·ne1; a product that starts inside a matrix (the up half of a fused gate_up, or a slice of the
 * output's rows) saw the same input at the matrix's start and is skipped. */
static void collect(void *ctx, const ts_gguf_tensor *W, int64_t row0, const float *x, int64_t T) {
    collector *c = ctx;
    if (c->failed || W->name.len < 4 || memcmp(W->name.ptr, "blk.", 4) != 0 || row0 % W->ne[1] != 0) return;
    const int i = entry_of_tensor(c, W);
    if (i < 0) {
        c->failed = 1;
        return;
    }
    ts_imatrix_entry *e = &c->im->e[i];
    const int64_t m = row0 / W->ne[1], n = e->n_in;
    float *s2 = e->sum2 + m * n, *s1 = e->sum ? e->sum + m * n : NULL; /* no Σx after a .dat file */
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < n; j++) s2[j] += x[t * n + j] * x[t * n + j];
    for (int64_t t = 0; s1 && t < T; t++)
        for (int64_t j = 0; j < n; j++) s1[j] += x[t * n + j];
    e->counts[m] += T;
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(s2[j])) {
            c->failed = 1;
            ts_errf(c->err, c->errlen,
                    "a non-finite sum of squared activations entering %s (column %" PRId64 ")", e->name, j);
            return;
        }
}

int ts_imatrix_collect(ts_imatrix *im, const ts_model *m, const int32_t *ids, int64_t n, int64_t n_ctx,
                       int64_t max_chunks, const char *dataset, bool progress, char *err, size_t errlen) {
    if (n_ctx < 1)
        return ts_errf(err, errlen, "the chunk size must be at least one token (got %" PRId64 ")", n_ctx);
    int64_t n_chunks = n / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunks) n_chunks = max_chunks;
    if (n_chunks < 1)
        return ts_errf(err, errlen,
                       "%" PRId64 " tokens do not fill one chunk of %" PRId64 " (use a smaller -c)", n,
                       n_ctx);
    if (im->chunk_size && im->chunk_size != n_ctx)
        fprintf(stderr,
                "imatrix: note: the files read used chunks of %" PRId64 " tokens, this run %" PRId64 "\n",
                im->chunk_size, n_ctx);
    const int64_t ub = n_ctx < 512 ? n_ctx : 512;
    ts_cpu_work *w = ts_cpu_work_new(m, ub, n_ctx, err, errlen);
    if (!w) return -1;
    ts_seq_state st;
    if (ts_seq_state_init(&st, m, n_ctx, err, errlen)) {
        ts_cpu_work_free(w);
        return -1;
    }
    collector c = {.im = im, .err = err, .errlen = errlen};
    ts_cpu_set_matmul_hook(collect, &c);
    int rc = 0;
    for (int64_t k = 0; !rc && k < n_chunks; k++) {
        ts_seq_state_reset(&st, m);
        for (int64_t t0 = 0; !rc && t0 < n_ctx; t0 += ub) {
            const int64_t T = n_ctx - t0 < ub ? n_ctx - t0 : ub;
            rc = ts_cpu_forward(w, &st, ids + k * n_ctx + t0, T, NULL, false, err, errlen);
            if (!rc && c.failed) rc = -1;
        }
        if (!rc && progress) fprintf(stderr, "imatrix: chunk %" PRId64 " of %" PRId64 "\n", k + 1, n_chunks);
    }
    ts_cpu_set_matmul_hook(NULL, NULL);
    ts_seq_state_free(&st);
    ts_cpu_work_free(w);
    free(c.seen), free(c.seen_entry);
    if (rc) return -1;
    im->chunk_size = n_ctx;
    im->chunk_count += n_chunks;
    return dataset ? add_dataset(im, dataset, strlen(dataset), err, errlen) : 0;
}

/* ---- files ------------------------------------------------------------------------------- */

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const ts_imatrix_entry *)a)->name, ((const ts_imatrix_entry *)b)->name);
}

static bool ends_with(const char *s, size_t n, const char *suf, size_t *stem) {
    const size_t m = strlen(suf);
    if (n <= m || memcmp(s + n - m, suf, m) != 0) return false;
    *stem = n - m;
    return true;
}

static int read_gguf(ts_imatrix *im, ts_gguf *g, const char *path, char *err, size_t errlen) {
    size_t found = 0;
    for (int64_t i = 0; i < ts_gguf_tensor_count(g); i++) {
        const ts_gguf_tensor *s2 = ts_gguf_tensor_at(g, i);
        size_t stem;
        if (!ends_with(s2->name.ptr, s2->name.len, ".in_sum2", &stem)) continue;
        char name[TS_GGUF_MAX_NAME + 16];
        snprintf(name, sizeof name, "%.*s.counts", (int)stem, s2->name.ptr);
        const ts_gguf_tensor *cn = ts_gguf_find_tensor(g, name);
        snprintf(name, sizeof name, "%.*s.in_sum", (int)stem, s2->name.ptr);
        const ts_gguf_tensor *s1 = ts_gguf_find_tensor(g, name);
        const int64_t n_in = s2->ne[0], n_mat = s2->nelements / s2->ne[0];
        if (!cn)
            return ts_errf(err, errlen, "%s: %.*s has no counts tensor %.*s.counts", path, (int)s2->name.len,
                           s2->name.ptr, (int)stem, s2->name.ptr);
        if (s2->type != 0 || cn->type != 0 || (s1 && s1->type != 0))
            return ts_errf(err, errlen, "%s: the importance tensors of %.*s must be F32", path, (int)stem,
                           s2->name.ptr);
        if (s2->n_dims > 2 || cn->nelements != n_mat || (s1 && s1->nelements != s2->nelements))
            return ts_errf(err, errlen,
                           "%s: the sums and counts of %.*s do not match (in_sum2 %" PRId64 " x %" PRId64
                           ", counts %" PRId64 " values)",
                           path, (int)stem, s2->name.ptr, n_in, n_mat, cn->nelements);
        const int k = entry_for(im, s2->name.ptr, stem, n_in, n_mat, s1 != NULL, err, errlen);
        if (k < 0) return -1;
        ts_imatrix_entry *e = &im->e[k];
        const float *v2 = s2->data, *v1 = s1 ? s1->data : NULL, *vc = cn->data;
        for (int64_t j = 0; j < n_mat; j++) {
            float cnt;
            memcpy(&cnt, vc + j, sizeof cnt);
            if (!(cnt >= 0 && cnt < 9.0e15f))
                return ts_errf(err, errlen, "%s: count %" PRId64 " of %s is %g, not a token count", path, j,
                               e->name, (double)cnt);
            e->counts[j] += llroundf(cnt);
        }
        for (int64_t j = 0; j < n_in * n_mat; j++) {
            float a, b = 0;
            memcpy(&a, v2 + j, sizeof a);
            if (v1) memcpy(&b, v1 + j, sizeof b);
            if (!isfinite(a) || a < 0 || !isfinite(b))
                return ts_errf(err, errlen, "%s: value %" PRId64 " of %s.in_sum%s is %g", path, j, e->name,
                               isfinite(b) ? "2" : "", (double)(isfinite(b) ? a : b));
            e->sum2[j] += a;
            if (e->sum) e->sum[j] += b;
        }
        if (!v1 && e->sum) free(e->sum), e->sum = NULL; /* sums of x from only some sources mean nothing */
        found++;
    }
    if (!found)
        return ts_errf(err, errlen,
                       "%s holds no importance data (no <name>.in_sum2 and <name>.counts tensors): is it an "
                       "imatrix file?",
                       path);
    const ts_gguf_value *ds = ts_gguf_find(g, "imatrix.datasets");
    if (ds && ds->type == TS_GGUF_ARRAY && ds->arr.elem_type == TS_GGUF_STRING)
        for (uint64_t i = 0; i < ds->arr.count; i++)
            if (add_dataset(im, ds->arr.items[i].str.ptr, ds->arr.items[i].str.len, err, errlen)) return -1;
    uint32_t v;
    if (ts_gguf_get_u32(g, "imatrix.chunk_size", &v, NULL, 0) == 0 && v > 0) im->chunk_size = v;
    if (ts_gguf_get_u32(g, "imatrix.chunk_count", &v, NULL, 0) == 0) im->chunk_count += v;
    return 0;
}

/* Little-endian reads from a bounded buffer. */
typedef struct {
    const uint8_t *p;
    size_t n, at;
} reader;

static bool rd(reader *r, void *out, size_t n) {
    if (r->n - r->at < n) return false;
    memcpy(out, r->p + r->at, n);
    r->at += n;
    return true;
}

static int read_dat(ts_imatrix *im, const uint8_t *buf, size_t size, const char *path, int64_t chunk_size,
                    char *err, size_t errlen) {
    reader r = {buf, size, 0};
    int32_t n_entries;
    if (!rd(&r, &n_entries, 4) || n_entries < 1)
        return ts_errf(err, errlen, "%s is neither a GGUF file nor a .dat imatrix with at least one entry",
                       path);
    if (chunk_size < 1) chunk_size = 1;
    int64_t max_calls = 0;
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        char name[DAT_MAX_NAME];
        if (!rd(&r, &len, 4) || len < 1 || len >= DAT_MAX_NAME || !rd(&r, name, (size_t)len) ||
            !rd(&r, &ncall, 4) || !rd(&r, &nval, 4) || ncall < 0 || nval < 1 ||
            (size_t)nval > (r.n - r.at) / 4)
            return ts_errf(err, errlen, "%s: entry %d of %d of this .dat imatrix is truncated or malformed",
                           path, i + 1, n_entries);
        if (memchr(name, 0, (size_t)len))
            return ts_errf(err, errlen, "%s: the name of entry %d holds a NUL byte", path, i + 1);
        /* the .dat form keeps one count a tensor: its values are mean(x²) · ncall */
        const int k = entry_for(im, name, (size_t)len, nval, 1, false, err, errlen);
        if (k < 0) return -1;
        ts_imatrix_entry *e = &im->e[k];
        for (int32_t j = 0; j < nval; j++) {
            float v = 0;
            rd(&r, &v, 4); /* in bounds: checked above */
            if (!isfinite(v) || v < 0)
                return ts_errf(err, errlen, "%s: value %d of %s is %g", path, j, e->name, (double)v);
            e->sum2[j] += v * (float)chunk_size;
        }
        e->counts[0] += (int64_t)ncall * chunk_size;
        if (ncall > max_calls) max_calls = ncall;
    }
    int32_t last_call, dlen;
    char ds[DAT_MAX_NAME];
    if (rd(&r, &last_call, 4) && rd(&r, &dlen, 4) && dlen >= 0 && dlen < DAT_MAX_NAME &&
        rd(&r, ds, (size_t)dlen) && !memchr(ds, 0, (size_t)dlen) &&
        add_dataset(im, ds, (size_t)dlen, err, errlen))
        return -1;
    im->chunk_count += max_calls;
    if (!im->chunk_size) im->chunk_size = chunk_size;
    return 0;
}

int ts_imatrix_read(ts_imatrix *im, const char *path, int64_t dat_chunk_size, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ts_errf(err, errlen, "cannot open the imatrix file %s", path);
    char magic[4] = {0};
    const size_t got = fread(magic, 1, 4, f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        fclose(f);
        ts_gguf *g;
        if (ts_gguf_open(path, &g, err, errlen)) return -1;
        const int rc = read_gguf(im, g, path, err, errlen);
        ts_gguf_close(g);
        return rc;
    }
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0) buf = malloc((size_t)size + 1);
    const bool ok = buf && fread(buf, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    int rc = ok ? read_dat(im, buf, (size_t)size, path, dat_chunk_size, err, errlen)
                : ts_errf(err, errlen, "cannot read the imatrix file %s", path);
    free(buf);
    return rc;
}

int ts_imatrix_write_gguf(ts_imatrix *im, const char *path, char *err, size_t errlen) {
    qsort(im->e, im->n, sizeof *im->e, cmp_entry);
    ts_gguf_writer *w = ts_gguf_writer_new(TS_GGUF_DEFAULT_ALIGNMENT, err, errlen);
    if (!w) return -1;
    bool ok = ts_gguf_writer_set_str(w, "general.type", "imatrix") == 0 &&
              ts_gguf_writer_set_arr_str(w, "imatrix.datasets", (const char *const *)im->datasets,
                                         im->n_datasets) == 0 &&
              ts_gguf_writer_set_u32(w, "imatrix.chunk_count", (uint32_t)im->chunk_count) == 0 &&
              ts_gguf_writer_set_u32(w, "imatrix.chunk_size", (uint32_t)im->chunk_size) == 0;
    char name[TS_GGUF_MAX_NAME + 16];
    for (size_t i = 0; ok && i < im->n; i++) {
        const ts_imatrix_entry *e = &im->e[i];
        const int64_t ne[2] = {e->n_in, e->n_mat}, nc[2] = {1, e->n_mat};
        snprintf(name, sizeof name, "%s.in_sum2", e->name);
        ok = ts_gguf_writer_add_tensor(w, name, 0, 2, ne) == 0;
        snprintf(name, sizeof name, "%s.counts", e->name);
        ok = ok && ts_gguf_writer_add_tensor(w, name, 0, 2, nc) == 0;
        snprintf(name, sizeof name, "%s.in_sum", e->name);
        if (e->sum) ok = ok && ts_gguf_writer_add_tensor(w, name, 0, 2, ne) == 0;
    }
    ok = ok && ts_gguf_writer_begin_data(w, path) == 0;
    for (size_t i = 0; ok && i < im->n; i++) {
        const ts_imatrix_entry *e = &im->e[i];
        ok = ts_gguf_writer_write(w, e->sum2, (size_t)(e->n_in * e->n_mat) * sizeof(float)) == 0;
        for (int64_t j = 0; ok && j < e->n_mat; j++) {
            const float c = (float)e->counts[j];
            ok = ts_gguf_writer_write(w, &c, sizeof c) == 0;
        }
        if (e->sum)
            ok = ok && ts_gguf_writer_write(w, e->sum, (size_t)(e->n_in * e->n_mat) * sizeof(float)) == 0;
    }
    ok = ok && ts_gguf_writer_finish(w) == 0;
    const int rc = ok ? 0 : ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    ts_gguf_writer_free(w);
    return rc;
}

static bool put_i32(FILE *f, int64_t v) {
    const int32_t x = (int32_t)v;
    return fwrite(&x, 4, 1, f) == 1;
}

int ts_imatrix_write_dat(ts_imatrix *im, const char *path, char *err, size_t errlen) {
    qsort(im->e, im->n, sizeof *im->e, cmp_entry);
    const int64_t chunk = im->chunk_size > 0 ? im->chunk_size : 1;
    FILE *f = fopen(path, "wb");
    if (!f) return ts_errf(err, errlen, "cannot create %s", path);
    int64_t n_store = 0; /* llama.cpp leaves out entries that got no token at all */
    for (size_t i = 0; i < im->n; i++)
        for (int64_t j = 0; j < im->e[i].n_mat; j++)
            if (im->e[i].counts[j]) {
                n_store++;
                break;
            }
    bool ok = put_i32(f, n_store);
    for (size_t i = 0; ok && i < im->n; i++) {
        const ts_imatrix_entry *e = &im->e[i];
        int64_t max = 0;
        for (int64_t j = 0; j < e->n_mat; j++) max = e->counts[j] > max ? e->counts[j] : max;
        if (!max) continue;
        const int64_t ncall = (max + chunk - 1) / chunk, nval = e->n_in * e->n_mat;
        ok = put_i32(f, (int64_t)strlen(e->name)) &&
             fwrite(e->name, 1, strlen(e->name), f) == strlen(e->name) && put_i32(f, ncall) &&
             put_i32(f, nval);
        for (int64_t j = 0; ok && j < nval; j++) {
            float c = (float)e->counts[j / e->n_in], v = e->sum2[j];
            if (c == 0) v = 1, c = 1; /* an expert no token reached: weights of 1 */
            const float out = v / c * (float)ncall;
            ok = fwrite(&out, 4, 1, f) == 1;
        }
    }
    const char *ds = im->n_datasets ? im->datasets[im->n_datasets - 1] : "";
    ok = ok && put_i32(f, im->chunk_count) && put_i32(f, (int64_t)strlen(ds)) &&
         fwrite(ds, 1, strlen(ds), f) == strlen(ds);
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        remove(path);
        return ts_errf(err, errlen, "cannot write %s (disk full?)", path);
    }
    return 0;
}
