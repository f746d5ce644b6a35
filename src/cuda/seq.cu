// A CUDA sequence's state: its allocation in the memory plan's regions, reset, copies between sequences,
// snapshots to and from packed bytes, and the memory snapshots are kept in (a range of the context's
// reservation on the GPU, or pinned host memory). Interface: src/cuda/forward.h.
extern "C" {
#include "common/error.h"
#include "common/range_alloc.h"
}
#include "cuda/forward_ctx.cuh"
#include "cuda/upload.cuh"
#include "model/memplan.h"

#include <cuda_runtime.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

using ts_cu::cuda_err;
using ts_cu::gib;

// ---- sequences ----------------------------------------------------------------------------------

extern "C" int ts_cuda_seq_new(ts_cuda_ctx *c, int64_t n_ctx, ts_cuda_seq **out, char *err, size_t errlen) {
    *out = nullptr;
    const ts_hparams *hp = &c->m->hp;
    if (n_ctx < 1 || n_ctx > TS_MEMPLAN_MAX_SEQ_CTX)
        return ts_errf(err, errlen, "a CUDA sequence holds 1 to %d tokens (asked %" PRId64 ")",
                       TS_MEMPLAN_MAX_SEQ_CTX, n_ctx);
    ts_cuda_seq *q = (ts_cuda_seq *)calloc(1, sizeof *q);
    if (!q) return ts_errf(err, errlen, "out of memory");
    q->c = c, q->n_ctx = n_ctx, q->bytes = ts_memplan_seq_bytes(hp, n_ctx, nullptr);
    q->ptr = (void **)calloc((size_t)hp->n_layer * TS_CUDA_STATE_KINDS, sizeof(void *));
    cudaError_t e = q->ptr ? cudaMalloc(&q->mem, q->bytes) : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, to = 0;
        cudaMemGetInfo(&fr, &to);
        const size_t asked = q->bytes;
        free(q->ptr), free(q);
        return ts_errf(err, errlen,
                       "out of GPU memory for a sequence of %" PRId64
                       " tokens: %.2f GiB asked, %.2f GiB free",
                       n_ctx, gib(asked), gib(fr));
    }
    // the regions in the order and sizes of ts_memplan_seq_bytes
    uint8_t *p = (uint8_t *)q->mem;
    auto take = [&](size_t bytes) {
        void *r = p;
        p += ts_memplan_align(bytes);
        return r;
    };
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        void **s = q->ptr + (size_t)l * TS_CUDA_STATE_KINDS;
        if (hp->kind[l] == TS_LAYER_QSA) {
            s[TS_CUDA_K] = take(ts_memplan_qsa_kv_bytes(hp, n_ctx)),
            s[TS_CUDA_V] = take(ts_memplan_qsa_kv_bytes(hp, n_ctx));
            s[TS_CUDA_IDX_RAW] = take(ts_memplan_idx_raw_bytes(hp, n_ctx));
            s[TS_CUDA_IDX_BLK] = take(ts_memplan_idx_blk_bytes(hp, n_ctx));
        } else {
            s[TS_CUDA_CONV] = take(ts_memplan_gdn_conv_bytes(hp));
            s[TS_CUDA_SSM] = take(ts_memplan_gdn_state_bytes(hp));
        }
    }
    if (hp->ple_layer >= 0) {
        void **s = q->ptr + (size_t)hp->ple_layer * TS_CUDA_STATE_KINDS;
        s[TS_CUDA_PLE_CONV] = take(ts_memplan_ple_conv_bytes(hp));
        s[TS_CUDA_PLE_CTX] = take(ts_memplan_ple_ctx_bytes());
    }
    pthread_mutex_lock(&c->mu);
    int rc = n_ctx > c->scratch_ctx ? ts_cu::alloc_work(c, n_ctx, err, errlen) : 0;
    pthread_mutex_unlock(&c->mu);
    if (!rc) rc = ts_cuda_seq_reset(q, err, errlen);
    if (rc) {
        ts_cuda_seq_free(q);
        return -1;
    }
    *out = q;
    return 0;
}

extern "C" void ts_cuda_seq_free(ts_cuda_seq *q) {
    if (!q) return;
    pthread_mutex_lock(&q->c->mu);
    cudaStreamSynchronize(q->c->stream);
    pthread_mutex_unlock(&q->c->mu);
    cudaFree(q->mem);
    free(q->ptr);
    free(q);
}

extern "C" int ts_cuda_seq_reset(ts_cuda_seq *q, char *err, size_t errlen) {
    const ts_hparams *hp = &q->c->m->hp;
    ts_cuda_ctx *c = q->c;
    pthread_mutex_lock(&c->mu);
    cudaError_t e =
        cudaMemsetAsync(q->mem, 0, q->bytes, c->stream); // zero states (caches are position-indexed)
    if (e == cudaSuccess && hp->ple_layer >= 0) {
        int32_t eos[TS_MAX_NGRAM];
        for (int i = 0; i < TS_MAX_NGRAM; i++) eos[i] = (int32_t)hp->ple_eos;
        e = cudaMemcpyAsync(q->ptr[(size_t)hp->ple_layer * TS_CUDA_STATE_KINDS + TS_CUDA_PLE_CTX], eos,
                            sizeof eos, cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream); // eos is on this stack
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    pthread_mutex_unlock(&c->mu);
    q->pos = 0;
    return e == cudaSuccess ? 0 : cuda_err(err, errlen, "resetting a sequence", e);
}

extern "C" int64_t ts_cuda_seq_pos(const ts_cuda_seq *q) {
    return q->pos;
}
extern "C" int64_t ts_cuda_seq_n_ctx(const ts_cuda_seq *q) {
    return q->n_ctx;
}
extern "C" size_t ts_cuda_seq_bytes(const ts_cuda_seq *q) {
    return q->bytes;
}

// ---- copies and snapshots of a sequence's state ------------------------------------------------
//
// What a sequence at position pos holds, region by region in ts_cuda_seq_new's order: the QSA keys,
// values and raw indexer keys of positions 0 .. pos − 1, the pooled block keys of blocks 0 .. pos / B,
// and the GDN convolution history and recurrent state, the PLE convolution history and n-gram
// context whole. visit(kind, layer, bytes) for each; the pointers come from each sequence's table.
namespace {

template <class F> void used_regions(const ts_hparams *hp, int64_t pos, F visit) {
    // the sizes of ts_cuda_seq_new's regions (src/model/memplan.h) at n = pos
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (hp->kind[l] == TS_LAYER_QSA) {
            visit(TS_CUDA_K, l, ts_memplan_qsa_kv_bytes(hp, pos));
            visit(TS_CUDA_V, l, ts_memplan_qsa_kv_bytes(hp, pos));
            visit(TS_CUDA_IDX_RAW, l, ts_memplan_idx_raw_bytes(hp, pos));
            visit(TS_CUDA_IDX_BLK, l, ts_memplan_idx_blk_bytes(hp, pos));
        } else {
            visit(TS_CUDA_CONV, l, ts_memplan_gdn_conv_bytes(hp));
            visit(TS_CUDA_SSM, l, ts_memplan_gdn_state_bytes(hp));
        }
    }
    if (hp->ple_layer >= 0) {
        visit(TS_CUDA_PLE_CONV, (uint32_t)hp->ple_layer, ts_memplan_ple_conv_bytes(hp));
        visit(TS_CUDA_PLE_CTX, (uint32_t)hp->ple_layer, ts_memplan_ple_ctx_bytes());
    }
}

void *region(const ts_cuda_seq *q, int kind, uint32_t l) {
    return q->ptr[(size_t)l * TS_CUDA_STATE_KINDS + kind];
}

size_t snapshot_size(const ts_hparams *hp, int64_t pos) {
    size_t n = 0;
    used_regions(hp, pos, [&](int, uint32_t, size_t bytes) { n += bytes; });
    return n;
}

// Copies the used regions between two sequences or a sequence and packed bytes (one of the three
// pointers set), on the context's stream, then waits for them. dst's state is zeroed first. The
// packed bytes may be in host memory (pageable or pinned) or device memory (a snapshot kept on the
// GPU): cudaMemcpyDefault tells them apart by their address (unified addressing).
int copy_state(ts_cuda_seq *dst, const ts_cuda_seq *src, void *packed_out, const void *packed_in, int64_t pos,
               char *err, size_t errlen) {
    ts_cuda_ctx *c = (dst ? dst : src)->c;
    const ts_hparams *hp = &c->m->hp;
    pthread_mutex_lock(&c->mu);
    cudaError_t e = dst ? cudaMemsetAsync(dst->mem, 0, dst->bytes, c->stream) : cudaSuccess;
    size_t off = 0;
    used_regions(hp, pos, [&](int kind, uint32_t l, size_t bytes) {
        if (e != cudaSuccess || !bytes) return;
        if (dst && src)
            e = cudaMemcpyAsync(region(dst, kind, l), region(src, kind, l), bytes, cudaMemcpyDeviceToDevice,
                                c->stream);
        else if (dst)
            e = cudaMemcpyAsync(region(dst, kind, l), (const uint8_t *)packed_in + off, bytes,
                                cudaMemcpyDefault, c->stream);
        else
            e = cudaMemcpyAsync((uint8_t *)packed_out + off, region(src, kind, l), bytes, cudaMemcpyDefault,
                                c->stream);
        off += bytes;
    });
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream); // host buffers are the caller's
    pthread_mutex_unlock(&c->mu);
    if (e != cudaSuccess) return cuda_err(err, errlen, "copying a sequence's state", e);
    if (dst) dst->pos = pos;
    return 0;
}

} // namespace

extern "C" int ts_cuda_seq_copy(ts_cuda_seq *dst, const ts_cuda_seq *src, char *err, size_t errlen) {
    if (dst->c != src->c)
        return ts_errf(err, errlen, "a CUDA sequence can only be copied within its context");
    if (src->pos > dst->n_ctx)
        return ts_errf(err, errlen,
                       "the copy holds %" PRId64 " tokens, more than the %" PRId64 " of the sequence",
                       src->pos, dst->n_ctx);
    return copy_state(dst, src, nullptr, nullptr, src->pos, err, errlen);
}

extern "C" size_t ts_cuda_seq_snapshot_bytes(const ts_cuda_seq *q) {
    return snapshot_size(&q->c->m->hp, q->pos);
}

extern "C" int ts_cuda_seq_snapshot_save(const ts_cuda_seq *q, void *data, char *err, size_t errlen) {
    return copy_state(nullptr, q, data, nullptr, q->pos, err, errlen);
}

extern "C" int ts_cuda_seq_snapshot_load(ts_cuda_seq *q, const void *data, size_t bytes, int64_t pos,
                                         char *err, size_t errlen) {
    const size_t want = pos >= 0 && pos <= q->n_ctx ? snapshot_size(&q->c->m->hp, pos) : 0;
    if (pos < 0 || pos > q->n_ctx || bytes != want)
        return ts_errf(err, errlen,
                       "the snapshot holds %zu bytes of state at position %" PRId64
                       ", which a sequence of %" PRId64
                       " tokens of this model on the CUDA backend cannot take "
                       "(%zu bytes): it was saved from another model or backend, or it is damaged",
                       bytes, pos, q->n_ctx, want);
    return copy_state(q, nullptr, nullptr, data, pos, err, errlen);
}

// ---- memory for snapshots -----------------------------------------------------------------------
// A snapshot kept on the GPU is a range of the context's reservation (a cudaMalloc per snapshot
// would synchronise the device and could take memory the plan gave to something else); one moved
// off the GPU is pinned host memory, so that restoring it is a fast host-to-device copy.

extern "C" void *ts_cuda_snap_alloc(ts_cuda_ctx *c, ts_snapshot_place where, size_t bytes) {
    if (where == TS_SNAPSHOT_HOST) {
        void *p = nullptr;
        if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
        }
        return p;
    }
    size_t off = 0;
    pthread_mutex_lock(&c->mu);
    const bool ok = c->snap_ranges && ts_range_take(c->snap_ranges, bytes, &off);
    pthread_mutex_unlock(&c->mu);
    return ok ? (uint8_t *)c->snap_mem + off : nullptr;
}

extern "C" void ts_cuda_snap_free(ts_cuda_ctx *c, ts_snapshot_place where, void *p) {
    if (where == TS_SNAPSHOT_HOST) {
        cudaFreeHost(p);
        return;
    }
    pthread_mutex_lock(&c->mu);
    ts_range_give(c->snap_ranges, (size_t)((uint8_t *)p - (uint8_t *)c->snap_mem));
    pthread_mutex_unlock(&c->mu);
}

extern "C" bool ts_cuda_snap_fits(ts_cuda_ctx *c, size_t bytes) {
    pthread_mutex_lock(&c->mu);
    const bool ok = c->snap_ranges && ts_range_fits(c->snap_ranges, bytes);
    pthread_mutex_unlock(&c->mu);
    return ok;
}

extern "C" void ts_cuda_snap_usage(ts_cuda_ctx *c, size_t *used, size_t *count) {
    pthread_mutex_lock(&c->mu);
    *used = c->snap_ranges ? ts_range_used(c->snap_ranges) : 0;
    *count = c->snap_ranges ? ts_range_count(c->snap_ranges) : 0;
    pthread_mutex_unlock(&c->mu);
}

extern "C" int ts_cuda_snap_copy(ts_cuda_ctx *c, void *dst, const void *src, size_t bytes, char *err,
                                 size_t errlen) {
    pthread_mutex_lock(&c->mu);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    pthread_mutex_unlock(&c->mu);
    return e == cudaSuccess ? 0 : cuda_err(err, errlen, "copying a snapshot", e);
}
