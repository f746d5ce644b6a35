/* Snapshots of a session's state (include/turbospark.h): in memory (a backend's packed bytes,
 * ts_backend_ops.snapshot_save), as bytes and in files. This file alone knows where a snapshot's
 * bytes are (malloc'd host memory, or the backend's pinned host or reserved device memory) and
 * gives them back.
 *
 * The encoding, little-endian (the machines we run on):
 *   "TSSNAP\0\0"  8 bytes of magic
 *   u32 version   1
 *   u32 backend   ts_backend
 *   i64 pos       tokens the state holds
 *   u64 model     FNV-1a 64 over the model's tensor table (names, types, shapes, in file order): a
 *                 state fits a model of the same shape and quantization; the weights' values are not
 *                 hashed (reading tens of GB to save a state would defeat the point)
 *   u64 n         bytes of state, then the state itself. */
#include "turbospark.h"

#include "common/error.h"
#include "engine/backend.h"
#include "gguf/gguf.h"
#include "model/qwen4exp.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a snapshot's bytes are, and who gives them back. */
typedef enum snap_mem {
    MEM_MALLOC, /* host memory from malloc */
    MEM_PINNED, /* pinned host memory from the backend (snap_alloc, TS_SNAPSHOT_HOST) */
    MEM_DEVICE, /* the backend's reserved device memory (snap_alloc, TS_SNAPSHOT_DEVICE) */
} snap_mem;

struct ts_snapshot {
    const ts_model *m;   /* the model it was taken with (its backend context owns pinned/device memory) */
    ts_backend backend;  /* the backend whose packed layout data holds */
    int64_t pos;         /* tokens the state holds */
    size_t n;            /* bytes of data */
    unsigned char *data; /* the backend's packed state, in memory of kind mem */
    snap_mem mem;        /* where data is, and so who frees it */
};

static const char k_magic[8] = {'T', 'S', 'S', 'N', 'A', 'P', 0, 0};
enum { k_version = 1, k_header = 8 + 4 + 4 + 8 + 8 + 8 };

/* The backend's context that gave a snapshot its pinned or device memory. */
static void *snap_ctx(const ts_snapshot *snap) {
    return snap->m->backend_ctx[snap->backend];
}

static void data_free(const ts_snapshot *snap) {
    if (snap->mem == MEM_MALLOC)
        free(snap->data);
    else
        ts_backend_ops_of(snap->backend)
            ->snap_free(snap_ctx(snap), snap->mem == MEM_DEVICE ? TS_SNAPSHOT_DEVICE : TS_SNAPSHOT_HOST,
                        snap->data);
}

/* A snapshot of s's state in memory of kind mem (MEM_MALLOC or MEM_DEVICE). */
static int take_snapshot(const ts_session *s, snap_mem mem, ts_snapshot **out, char *err, size_t errlen) {
    *out = NULL;
    const ts_backend_ops *be = ts_backend_ops_of(ts_session_backend(s));
    if (!be->snapshot_bytes)
        return ts_errf(err, errlen,
                       "snapshots of a session's state are not implemented on the %s backend yet", be->name);
    if (mem == MEM_DEVICE && !be->snap_alloc)
        return ts_errf(err, errlen, "the %s backend keeps no snapshots in device memory", be->name);
    const void *seq = ts_session_backend_seq(s);
    const size_t n = be->snapshot_bytes(seq);
    ts_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return ts_errf(err, errlen, "out of memory for a snapshot");
    *snap = (ts_snapshot){.m = ts_session_model(s),
                          .backend = ts_session_backend(s),
                          .pos = ts_session_pos(s),
                          .n = n,
                          .mem = mem};
    snap->data =
        mem == MEM_DEVICE ? be->snap_alloc(snap_ctx(snap), TS_SNAPSHOT_DEVICE, n) : malloc(n ? n : 1);
    if (!snap->data) {
        free(snap);
        return mem == MEM_DEVICE
                   ? ts_errf(err, errlen,
                             "the GPU memory reserved for snapshots (ts_cuda_params.snapshot_bytes, none by "
                             "default) has no free block of %.1f MiB for this one",
                             n / 1048576.0)
                   : ts_errf(err, errlen, "out of memory for a snapshot of %.1f MiB", n / 1048576.0);
    }
    if (be->snapshot_save(seq, snap->data, err, errlen)) {
        ts_snapshot_free(snap);
        return -1;
    }
    *out = snap;
    return 0;
}

int ts_session_snapshot(const ts_session *s, ts_snapshot **out, char *err, size_t errlen) {
    return take_snapshot(s, MEM_MALLOC, out, err, errlen);
}

int ts_session_snapshot_device(const ts_session *s, ts_snapshot **out, char *err, size_t errlen) {
    return take_snapshot(s, MEM_DEVICE, out, err, errlen);
}

bool ts_session_snapshot_fits_device(const ts_session *s) {
    const ts_backend_ops *be = ts_backend_ops_of(ts_session_backend(s));
    const ts_model *m = ts_session_model(s);
    return be->snap_fits && be->snapshot_bytes &&
           be->snap_fits(m->backend_ctx[ts_session_backend(s)],
                         be->snapshot_bytes(ts_session_backend_seq(s)));
}

size_t ts_session_snapshot_bytes(const ts_session *s) {
    const ts_backend_ops *be = ts_backend_ops_of(ts_session_backend(s));
    return be->snapshot_bytes ? sizeof(ts_snapshot) + be->snapshot_bytes(ts_session_backend_seq(s)) : 0;
}

int ts_session_restore(ts_session *s, const ts_snapshot *snap, char *err, size_t errlen) {
    const ts_backend_ops *be = ts_backend_ops_of(ts_session_backend(s));
    if (snap->m != ts_session_model(s))
        return ts_errf(err, errlen, "a snapshot can only be restored into a session of its model");
    if (!be->snapshot_load)
        return ts_errf(err, errlen,
                       "snapshots of a session's state are not implemented on the %s backend yet", be->name);
    if (snap->backend != ts_session_backend(s))
        return ts_errf(err, errlen,
                       "a snapshot can only be restored into a session of the backend it was taken on");
    if (snap->pos > ts_session_n_ctx(s))
        return ts_errf(err, errlen,
                       "the snapshot holds %" PRId64 " tokens, more than the session's context of %" PRId64,
                       snap->pos, ts_session_n_ctx(s));
    return be->snapshot_load(ts_session_backend_seq(s), snap->data, snap->n, snap->pos, err, errlen);
}

int ts_snapshot_to_host(ts_snapshot *snap, char *err, size_t errlen) {
    if (snap->mem != MEM_DEVICE) return 0;
    const ts_backend_ops *be = ts_backend_ops_of(snap->backend);
    void *ctx = snap_ctx(snap);
    unsigned char *host = be->snap_alloc(ctx, TS_SNAPSHOT_HOST, snap->n);
    if (!host)
        return ts_errf(err, errlen, "pinned host memory for a snapshot of %.1f MiB was refused",
                       snap->n / 1048576.0);
    if (be->snap_copy(ctx, host, snap->data, snap->n, err, errlen)) {
        be->snap_free(ctx, TS_SNAPSHOT_HOST, host);
        return -1;
    }
    be->snap_free(ctx, TS_SNAPSHOT_DEVICE, snap->data);
    snap->data = host, snap->mem = MEM_PINNED;
    return 0;
}

int64_t ts_snapshot_pos(const ts_snapshot *snap) {
    return snap->pos;
}
ts_snapshot_place ts_snapshot_where(const ts_snapshot *snap) {
    return snap->mem == MEM_DEVICE ? TS_SNAPSHOT_DEVICE : TS_SNAPSHOT_HOST;
}
size_t ts_snapshot_bytes(const ts_snapshot *snap) {
    return sizeof *snap + (snap->mem == MEM_DEVICE ? 0 : snap->n);
}
size_t ts_snapshot_device_bytes(const ts_snapshot *snap) {
    return snap->mem == MEM_DEVICE ? snap->n : 0;
}

void ts_snapshot_free(ts_snapshot *snap) {
    if (!snap) return;
    if (snap->data) data_free(snap);
    free(snap);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t model_fingerprint(const ts_model *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < ts_gguf_tensor_count(m->gguf); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(m->gguf, i);
        h = fnv(h, t->name.ptr, (size_t)t->name.len);
        h = fnv(h, &t->type, sizeof t->type);
        h = fnv(h, &t->n_dims, sizeof t->n_dims);
        h = fnv(h, t->ne, t->n_dims * sizeof t->ne[0]);
    }
    return h;
}

int ts_snapshot_encode(const ts_snapshot *snap, void **data, size_t *size, char *err, size_t errlen) {
    *data = NULL, *size = 0;
    unsigned char *p = malloc(k_header + snap->n);
    if (!p) return ts_errf(err, errlen, "out of memory encoding a snapshot of %.1f MiB", snap->n / 1048576.0);
    const uint32_t version = k_version, backend = (uint32_t)snap->backend;
    const uint64_t model = model_fingerprint(snap->m), n = snap->n;
    memcpy(p, k_magic, 8);
    memcpy(p + 8, &version, 4);
    memcpy(p + 12, &backend, 4);
    memcpy(p + 16, &snap->pos, 8);
    memcpy(p + 24, &model, 8);
    memcpy(p + 32, &n, 8);
    if (snap->mem == MEM_DEVICE) {
        if (ts_backend_ops_of(snap->backend)
                ->snap_copy(snap_ctx(snap), p + k_header, snap->data, snap->n, err, errlen)) {
            free(p);
            return -1;
        }
    } else {
        memcpy(p + k_header, snap->data, snap->n);
    }
    *data = p, *size = k_header + snap->n;
    return 0;
}

int ts_snapshot_decode(const ts_model *m, const void *data, size_t size, ts_snapshot **out, char *err,
                       size_t errlen) {
    *out = NULL;
    const unsigned char *p = data;
    if (size < k_header || memcmp(p, k_magic, 8))
        return ts_errf(err, errlen, "these %zu bytes are not a turbospark session state (no TSSNAP header)",
                       size);
    uint32_t version, backend;
    int64_t pos;
    uint64_t model, n;
    memcpy(&version, p + 8, 4), memcpy(&backend, p + 12, 4), memcpy(&pos, p + 16, 8);
    memcpy(&model, p + 24, 8), memcpy(&n, p + 32, 8);
    if (version != k_version)
        return ts_errf(err, errlen,
                       "a session state of format version %" PRIu32 " (this build reads version %d)", version,
                       k_version);
    if (backend >= TS_MODEL_BACKENDS || pos < 0)
        return ts_errf(err, errlen,
                       "the session state's header is damaged (backend %" PRIu32 ", position %" PRId64 ")",
                       backend, pos);
    if (model != model_fingerprint(m))
        return ts_errf(err, errlen,
                       "the session state was saved with another model (its tensors differ from this one's)");
    if (n != size - k_header)
        return ts_errf(err, errlen,
                       "the session state says %" PRIu64
                       " bytes of state but holds %zu: it is truncated or damaged",
                       n, size - k_header);
    ts_snapshot *snap = calloc(1, sizeof *snap);
    unsigned char *buf = malloc(n ? n : 1);
    if (!snap || !buf) {
        free(snap), free(buf);
        return ts_errf(err, errlen, "out of memory for a snapshot of %.1f MiB", n / 1048576.0);
    }
    memcpy(buf, p + k_header, n);
    *snap = (ts_snapshot){
        .m = m, .backend = (ts_backend)backend, .pos = pos, .n = n, .data = buf, .mem = MEM_MALLOC};
    *out = snap;
    return 0;
}

int ts_session_save_file(const ts_session *s, const char *path, char *err, size_t errlen) {
    ts_snapshot *snap = NULL;
    void *data = NULL;
    size_t size = 0;
    if (ts_session_snapshot(s, &snap, err, errlen) || ts_snapshot_encode(snap, &data, &size, err, errlen)) {
        ts_snapshot_free(snap);
        return -1;
    }
    ts_snapshot_free(snap);
    char tmp[4096];
    int rc = 0;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        rc = ts_errf(err, errlen, "the path %.200s... is too long", path);
    } else {
        FILE *f = fopen(tmp, "wb");
        if (!f)
            rc = ts_errf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        else {
            const bool ok = fwrite(data, 1, size, f) == size;
            if (fclose(f) || !ok)
                rc = ts_errf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
            else if (rename(tmp, path))
                rc = ts_errf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
            if (rc) remove(tmp);
        }
    }
    free(data);
    return rc;
}

int ts_session_load_file(ts_session *s, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    unsigned char *data = size >= 0 && !fseek(f, 0, SEEK_SET) ? malloc(size ? (size_t)size : 1) : NULL;
    int rc = 0;
    if (size < 0)
        rc = ts_errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    else if (!data)
        rc = ts_errf(err, errlen, "out of memory reading %s (%ld bytes)", path, size);
    else if (fread(data, 1, (size_t)size, f) != (size_t)size)
        rc = ts_errf(err, errlen, "cannot read %s", path);
    fclose(f);
    ts_snapshot *snap = NULL;
    char e2[512];
    if (!rc && ts_snapshot_decode(ts_session_model(s), data, (size_t)size, &snap, e2, sizeof e2))
        rc = ts_errf(err, errlen, "%s: %s", path, e2);
    free(data);
    if (!rc && ts_session_restore(s, snap, e2, sizeof e2)) rc = ts_errf(err, errlen, "%s: %s", path, e2);
    ts_snapshot_free(snap);
    return rc;
}
