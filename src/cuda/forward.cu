// The qwen4exp forward on one CUDA GPU: the context (the memory plan, the weight upload of
// src/cuda/upload.cuh, the workspaces), the micro-batch tables, the layer loop (the twin of
// src/cpu/forward.c) and decode graphs. Sequences and snapshots: src/cuda/seq.cu; the context's struct:
// src/cuda/forward_ctx.cuh. Interface and behaviour: src/cuda/forward.h; the blocks: src/cuda/layers.h.
extern "C" {
#include "common/error.h"
#include "common/range_alloc.h"
#include "quant/quant.h"
}
#include "cuda/forward_ctx.cuh"
#include "cuda/gemm_tc.h"
#include "cuda/layers.h"
#include "cuda/upload.cuh"
#include "model/memplan.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <inttypes.h>
#include <math.h>
#include <new>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

namespace {

// Sizes, alignment and the margin kept free come from the memory plan (src/model/memplan.h).
constexpr int kMaxLogitRows = TS_MEMPLAN_MAX_LOGIT_ROWS; // rows of logits computed per output launch
constexpr size_t kSnapAlign = 256; // snapshots kept on the GPU start at multiples of this (cudaMalloc's)

using ts_cu::cuda_err;
using ts_cu::gib;
using ts_cu::kStage;
using ts_cu::up_table;
using ts_cu::up_trunk;
using ts_cu::uploader;

// ---- small kernels of the forward itself ------------------------------------------------------

// Rsel[i] = R[rows[i]] (W floats each)
__global__ void gather_rows_kernel(const float *__restrict__ R, const int32_t *__restrict__ rows, int W,
                                   float *__restrict__ out) {
    const float *src = R + (size_t)rows[blockIdx.x] * W;
    float *dst = out + (size_t)blockIdx.x * W;
    for (int i = threadIdx.x; i < W; i += blockDim.x) dst[i] = src[i];
}

__global__ void read_bw_kernel(const float4 *__restrict__ p, size_t n, float *sink) {
    float acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = __ldcs(p + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1.2345f) *sink = acc; // never true on the zeroed buffer; keeps the loads
}

} // namespace

extern "C" const char *const ts_cuda_prof_names[TS_PROF_KINDS] = {"embed", "hc",  "ple",   "gdn",
                                                                  "qsa",   "moe", "output"};

namespace ts_cu {
int alloc_work(ts_cuda_ctx *c, int64_t ctx, char *err, size_t errlen) {
    const ts_hparams *hp = &c->m->hp;
    const int64_t N = c->o.max_rows;
    if (c->work_mem) cudaFree(c->work_mem), c->work_mem = nullptr;
    ts_memplan_work L; // the regions and the blocks' scratch (src/model/memplan.h)
    ts_memplan_work_layout(hp, N, ctx, &L);
    const size_t bytes = L.total;
    cudaError_t e = cudaMalloc(&c->work_mem, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, to = 0;
        cudaMemGetInfo(&fr, &to);
        return ts_errf(err, errlen,
                       "out of GPU memory for the workspaces: %.2f GiB asked for micro-batches of %" PRId64
                       " rows at context %" PRId64 ", %.2f GiB free",
                       gib(bytes), N, ctx, gib(fr));
    }
    uint8_t *base = (uint8_t *)c->work_mem;
    auto at = [&](int region) { return (void *)(base + L.off[region]); };
    ts_cuda_work &w = c->w;
    w.cm = &c->cm, w.hp = hp, w.max_rows = N;
    w.R = (float *)at(TS_WORK_R), w.xn = (float *)at(TS_WORK_XN), w.mix = (float *)at(TS_WORK_MIX);
    w.lr = (float *)at(TS_WORK_LR), w.x = (float *)at(TS_WORK_X), w.y = (float *)at(TS_WORK_Y),
    w.inj = (float *)at(TS_WORK_INJ);
    w.qkv = (float *)at(TS_WORK_QKV), w.u = (float *)at(TS_WORK_U), w.z = (float *)at(TS_WORK_Z),
    w.o = (float *)at(TS_WORK_O);
    w.ba = (float *)at(TS_WORK_BA), w.qg = (float *)at(TS_WORK_QG), w.kv = (float *)at(TS_WORK_KV);
    w.iq = (float *)at(TS_WORK_IQ), w.ik = (float *)at(TS_WORK_IK);
    w.att = (float *)at(TS_WORK_ATT), w.router = (float *)at(TS_WORK_ROUTER),
    w.topk_id = (int32_t *)at(TS_WORK_TOPK_ID);
    w.topk_w = (float *)at(TS_WORK_TOPK_W), w.gu = (float *)at(TS_WORK_GU), w.eo = (float *)at(TS_WORK_EO),
    w.sg = (float *)at(TS_WORK_SG), w.route_count = (unsigned *)at(TS_WORK_ROUTE_COUNT),
    w.hc_ss = (float *)at(TS_WORK_HC_SS);
    w.hc_bar = w.route_count + N + (hp->n_embd + 7) / 8; /* (memplan.c: the last 2 of TS_WORK_ROUTE_COUNT) */
    w.emb = (float *)at(TS_WORK_EMB), w.pv = (float *)at(TS_WORK_PV);
    c->Rsel = (float *)at(TS_WORK_RSEL), c->xsel = (float *)at(TS_WORK_XSEL);
    c->logits = (float *)at(TS_WORK_LOGITS);
    w.scratch = base + L.scratch_off;
    w.scratch_bytes = L.scratch;
    w.tcx = at(TS_WORK_TCX), w.tcx_bytes = (size_t)L.elems[TS_WORK_TCX] * 4;
    c->scratch_ctx = ctx;
    c->b.max_ctx = ctx;
    if (cudaMemset(w.route_count, 0, (size_t)L.elems[TS_WORK_ROUTE_COUNT] * sizeof(unsigned)) != cudaSuccess)
        return ts_errf(err, errlen, "could not clear the router's and the MoE combine's counters on the GPU");
    for (int64_t i = 0; i <= N; i++) // graphs captured with the old buffers are stale
        if (c->graphs[i]) cudaGraphExecDestroy(c->graphs[i]), c->graphs[i] = nullptr, c->warm[i] = false;
    return 0;
}
} // namespace ts_cu

namespace {

// table layout (ints): ids[N] pos[N] row_seq[N] seq_row0[N+1] lrows[N]
size_t tab_ints(int64_t N) {
    return (size_t)(5 * N + 1);
}

// ---- the layer loop ----------------------------------------------------------------------------

struct prof_scope { // times one block into c->prof[kind] when profiling
    ts_cuda_ctx *c;
    int kind;
    prof_scope(ts_cuda_ctx *cc, int k) : c(cc), kind(k) {
        if (c->prof) cudaEventRecord(c->prof_ev[0], c->stream);
    }
    ~prof_scope() {
        if (!c->prof) return;
        cudaEventRecord(c->prof_ev[1], c->stream);
        cudaEventSynchronize(c->prof_ev[1]);
        float ms = 0;
        cudaEventElapsedTime(&ms, c->prof_ev[0], c->prof_ev[1]);
        c->prof[kind] += ms;
    }
};

void trace(ts_cuda_ctx *c, int layer, int block) {
    if (!c->trace) return;
    const ts_hparams *hp = &c->m->hp;
    const size_t n = (size_t)c->b.n_rows * hp->hc_count * hp->n_embd;
    float *h = (float *)malloc(n * sizeof(float));
    if (!h) return;
    cudaStreamSynchronize(c->stream);
    cudaMemcpy(h, c->w.R, n * sizeof(float), cudaMemcpyDeviceToHost);
    c->trace(c->trace_ctx, layer, block, h, c->b.n_rows);
    free(h);
}

// The step's name run_layers returns for a hyper-connection read (the graph capture below tells it apart).
constexpr const char *kHcReadFailed = "a hyper-connection read";

// Enqueues the micro-batch in c->b (tables already on the device): layers, then the logits of the
// first n_logit rows listed in lrows into c->logits. Returns 0 or the failing step's name.
const char *run_layers(ts_cuda_ctx *c, int n_logit) {
    const ts_hparams *hp = &c->m->hp;
    ts_cuda_work *w = &c->w;
    const ts_cuda_batch *b = &c->b;
    const int64_t N = b->n_rows;
    cudaStream_t s = c->stream;
    {
        prof_scope p(c, TS_PROF_EMBED);
        if (ts_cuda_embed(w, b, w->R, s)) return "the embedding";
    }
    trace(c, -1, 0);
    // A block's write and the next read's norm are one kernel (ts_cuda_hc_write_norm) except where
    // PLE changes R in between or the final mixer follows (it reads gathered rows); while tracing,
    // the plain write keeps R observable between blocks.
    bool normed = false; // w->xn holds the norm the next read needs
    w->hc_defer.next = NULL;
    w->hc_defer.off = c->trace != NULL; // R observable after every write
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const ts_cuda_layer *L = &c->cm.layers[l];
        if ((int32_t)l == hp->ple_layer) {
            prof_scope p(c, TS_PROF_PLE);
            if (ts_cuda_ple(w, L, b, (int)l, w->R, s)) return "PLE";
        }
        {
            prof_scope p(c, TS_PROF_HC);
            if (normed ? ts_cuda_hc_read_xn(w, &L->hc_attn, N, w->x, w->inj, s)
                       : ts_cuda_hc_read(w, &L->hc_attn, w->R, N, w->x, w->inj, s))
                return kHcReadFailed;
        }
        if (L->kind == TS_LAYER_GDN) {
            prof_scope p(c, TS_PROF_GDN);
            if (ts_cuda_gdn(w, L, b, (int)l, w->x, w->y, s)) return "GDN";
        } else {
            prof_scope p(c, TS_PROF_QSA);
            if (ts_cuda_qsa(w, L, b, (int)l, w->x, w->y, s)) return "QSA";
        }
        {
            prof_scope p(c, TS_PROF_HC);
            if (ts_cuda_hc_write_norm(w, w->R, w->y, w->inj, N, &L->hc_ffn, s))
                return "a hyper-connection write";
        }
        trace(c, (int)l, 0);
        {
            prof_scope p(c, TS_PROF_HC);
            if (ts_cuda_hc_read_xn(w, &L->hc_ffn, N, w->x, w->inj, s)) return kHcReadFailed;
        }
        // the MoE's last step (its combine) is done by the next write when that write is also the next
        // read's norm (ts_cuda_hc_write_norm_moe)
        // (unless the MoE's down launch made it: then a plain write, which the next read may take in)
        normed = l + 1 < hp->n_layer && (int32_t)(l + 1) != hp->ple_layer && !c->trace;
        int combined = 1; // y is the MoE output
        {
            prof_scope p(c, TS_PROF_MOE);
            combined = normed ? ts_cuda_moe_uncombined(w, L, (int)l, w->x, N, w->y, s)
                              : (ts_cuda_moe(w, L, (int)l, w->x, N, w->y, s) == 0 ? 1 : -1);
            if (combined < 0) return "MoE";
        }
        {
            prof_scope p(c, TS_PROF_HC);
            const ts_cuda_hc *next = normed ? &c->cm.layers[l + 1].hc_attn : NULL;
            if (!normed    ? ts_cuda_hc_write(hp, w->R, w->y, w->inj, N, s)
                : combined ? ts_cuda_hc_write_norm(w, w->R, w->y, w->inj, N, next, s)
                           : ts_cuda_hc_write_norm_moe(w, w->R, w->y, w->inj, N, next, s))
                return "a hyper-connection write";
        }
        trace(c, (int)l, 1);
    }
    if (w->hc_defer.next) return "a hyper-connection write (left to a read that did not follow)";
    if (n_logit > 0) {
        prof_scope p(c, TS_PROF_OUTPUT);
        const int W = (int)(hp->hc_count * hp->n_embd);
        gather_rows_kernel<<<n_logit, 256, 0, s>>>(w->R, c->tab_dev + 4 * c->o.max_rows + 1, W, c->Rsel);
        if (cudaPeekAtLastError() != cudaSuccess) return "gathering the logit rows";
        if (ts_cuda_hc_read(w, &c->cm.output_hc, c->Rsel, n_logit, c->xsel, nullptr, s))
            return "the final mixer";
        if (ts_cuda_matmul(&c->cm.output, 0, hp->n_vocab, c->xsel, n_logit, c->logits, s))
            return "the output matrix";
    }
    return nullptr;
}

} // namespace

// ---- public functions ---------------------------------------------------------------------------

// Makes the device look like a GPU of cap bytes: what the driver already holds (total − free) counts
// against the cap as it would on that GPU, and the rest of the free memory is allocated and held.
static int hold_beyond(ts_cuda_ctx *c, uint64_t cap, char *err, size_t errlen) {
    size_t fr = 0, to = 0;
    cudaMemGetInfo(&fr, &to);
    if (cap >= to) return 0;
    const size_t used = to - fr;
    if (cap <= used)
        return ts_errf(err, errlen,
                       "a GPU memory cap of %.2f GiB leaves nothing: %s already holds %.2f GiB of its %.2f",
                       gib(cap), c->device_name, gib(used), gib(to));
    const size_t hold = fr - (size_t)(cap - used);
    cudaError_t e = cudaMalloc(&c->ballast, hold);
    if (e != cudaSuccess) return cuda_err(err, errlen, "holding the memory beyond the GPU memory cap", e);
    return 0;
}

extern "C" int ts_cuda_ctx_new(const ts_model *m, const ts_cuda_options *o, ts_cuda_ctx **out, char *err,
                               size_t errlen) {
    *out = nullptr;
    const ts_hparams *hp = &m->hp;
    if (o->max_rows < 1 || o->plan_ctx < 1 || o->plan_seqs < 1 || o->min_rows < 0 ||
        o->min_rows > o->max_rows)
        return ts_errf(
            err, errlen,
            "the CUDA backend needs max_rows, plan_ctx and plan_seqs ≥ 1 and 0 ≤ min_rows ≤ max_rows");
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        return ts_errf(err, errlen, "no CUDA device is available (%s): use --backend cpu",
                       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    if (o->device < 0 || o->device >= ndev)
        return ts_errf(err, errlen, "CUDA device %d does not exist (this machine has %d)", o->device, ndev);
    if ((e = cudaSetDevice(o->device)) != cudaSuccess)
        return cuda_err(err, errlen, "selecting the device", e);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, o->device);
    if (prop.major < 9)
        return ts_errf(err, errlen,
                       "CUDA device %d (%s, compute capability %d.%d) is not supported: this build targets "
                       "Hopper (sm_90)",
                       o->device, prop.name, prop.major, prop.minor);

    ts_cuda_ctx *c = new (std::nothrow) ts_cuda_ctx();
    if (!c) return ts_errf(err, errlen, "out of memory");
    c->m = m, c->o = *o;
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    pthread_mutex_init(&c->mu, nullptr);
    c->cm.m = m;
    c->cm.layers = (ts_cuda_layer *)calloc(hp->n_layer, sizeof(ts_cuda_layer));
    if (hp->ple_layer >= 0 && !m->ple_table)
        c->cm.ple.heads = (ts_cuda_tensor *)calloc(hp->ple_nh, sizeof(ts_cuda_tensor));
    const char *g = getenv("TURBOSPARK_CUDA_GRAPH");
    c->use_graphs = !(g && !strcmp(g, "0"));
    const char *step_time = getenv("TURBOSPARK_CUDA_STEP_TIME");
    if (step_time && step_time[0] == '1') cudaEventCreate(&c->step_ev[0]), cudaEventCreate(&c->step_ev[1]);
    int rc = 0;
    if (!c->cm.layers || (hp->ple_layer >= 0 && !m->ple_table && !c->cm.ple.heads))
        rc = ts_errf(err, errlen, "out of memory");

    if (!rc && o->gpu_mem) rc = hold_beyond(c, o->gpu_mem, err, errlen);

    // the plan (src/model/memplan.h); the dry upload checks every tensor's type, and that the uploader
    // lays the weights out in the bytes the plan counts
    ts_memplan mp;
    ts_memplan_make(m, o->plan_ctx, o->plan_seqs, o->max_rows, &mp);
    mp.snapshots = o->snapshot_bytes;
    ts_cuda_plan &P = c->plan;
    P.weights = mp.weights, P.table = mp.table, P.seq_state = mp.seq_state, P.work = mp.work,
    P.snapshots = mp.snapshots;
    uploader dry{true, o->random_weights};
    dry.err = err, dry.errlen = errlen;
    if (!rc) {
        up_trunk(dry, m, &c->cm);
        const size_t trunk = dry.used;
        dry.used = 0;
        up_table(dry, m, &c->cm);
        rc = dry.rc;
        if (!rc && (trunk != P.weights || dry.used != P.table))
            rc = ts_errf(
                err, errlen,
                "internal error: the CUDA uploader lays out %zu bytes of weights and %zu of PLE table, "
                "the memory plan (src/model/memplan.c) counts %zu and %zu",
                trunk, dry.used, P.weights, P.table);
    }
    cudaMemGetInfo(&P.free_bytes, &P.total_bytes);
    if (o->gpu_mem && o->gpu_mem < P.total_bytes) P.total_bytes = o->gpu_mem;
    // with min_rows, fewer rows a micro-batch (halving, not below min_rows) until the workspaces fit
    while (!rc && o->min_rows && c->o.max_rows > o->min_rows) {
        ts_memplan t = mp;
        if (!ts_memplan_place(&t, o->ple, P.free_bytes, P.total_bytes, c->device_name, err, errlen)) break;
        c->o.max_rows = c->o.max_rows / 2 > o->min_rows ? c->o.max_rows / 2 : o->min_rows;
        ts_memplan_make(m, o->plan_ctx, o->plan_seqs, c->o.max_rows, &mp);
        mp.snapshots = o->snapshot_bytes;
        P.work = mp.work, P.seq_state = mp.seq_state;
    }
    if (!rc) {
        rc = ts_memplan_place(&mp, o->ple, P.free_bytes, P.total_bytes, c->device_name, err, errlen);
        P.table_on_host = mp.table_on_host;
    }
    const int64_t N = c->o.max_rows; // rows a micro-batch, as planned
    if (!rc) {
        c->graphs = (cudaGraphExec_t *)calloc((size_t)N + 1, sizeof(cudaGraphExec_t));
        c->warm = (bool *)calloc((size_t)N + 1, sizeof(bool));
        c->l_seq = (int *)calloc((size_t)N, sizeof(int));
        c->l_tok = (int64_t *)calloc((size_t)N, sizeof(int64_t));
        c->done = (int64_t *)calloc((size_t)N, sizeof(int64_t));
        if (!c->graphs || !c->warm || !c->l_seq || !c->l_tok || !c->done)
            rc = ts_errf(err, errlen, "out of memory");
    }

    // the upload
    uploader u{false, o->random_weights};
    u.err = err, u.errlen = errlen, u.progress = o->progress;
    if (!rc) {
        u.total = P.weights + P.table;
        const size_t arena = P.weights + (P.table_on_host ? 0 : P.table);
        if ((e = cudaMalloc(&c->weights, arena)) != cudaSuccess)
            rc = cuda_err(err, errlen, "allocating the weights", e);
        else if ((e = cudaMallocHost(&u.stage[0], kStage)) != cudaSuccess ||
                 (e = cudaMallocHost(&u.stage[1], kStage)) != cudaSuccess)
            rc = cuda_err(err, errlen, "allocating pinned staging buffers", e);
        else {
            cudaEventCreateWithFlags(&u.ev[0], cudaEventDisableTiming);
            cudaEventCreateWithFlags(&u.ev[1], cudaEventDisableTiming);
        }
    }
    if (!rc) {
        u.base = (uint8_t *)c->weights;
        up_trunk(u, m, &c->cm);
        if (!P.table_on_host) {
            up_table(u, m, &c->cm);
        } else if (!u.rc && P.table) {
            // pinned host memory, mapped into the device's address space
            if ((e = cudaHostAlloc(&c->table_host, P.table, cudaHostAllocMapped | cudaHostAllocPortable)) !=
                cudaSuccess) {
                u.rc = ts_errf(err, errlen,
                               "the PLE table (%.2f GiB) could not be placed in pinned host memory: %s",
                               gib(P.table), cudaGetErrorString(e));
            } else {
                uploader h{true, o->random_weights}; // lays out only: data = host pointers (replaced below)
                h.err = err, h.errlen = errlen;
                h.base = (uint8_t *)c->table_host;
                up_table(h, m, &c->cm);
                ts_cuda_tensor *ts = m->ple_table ? &c->cm.ple.joined : c->cm.ple.heads;
                const int nt = m->ple_table ? 1 : (int)hp->ple_nh;
                for (int i = 0; i < nt && !u.rc; i++) {
                    const ts_gguf_tensor *src = m->ple_table ? m->ple_table : m->ple_head_tables[i];
                    uint8_t *dst = (uint8_t *)ts[i].data;
                    const size_t bytes = ts[i].row_bytes * (size_t)ts[i].rows;
                    if (!o->random_weights) {
                        memcpy(dst, src->data, bytes);
                    } else {
                        float *row = (float *)malloc((size_t)ts[i].ne0 * 4);
                        for (int64_t r = 0; r < ts[i].rows && r < 61 && row; r++) {
                            for (int64_t j = 0; j < ts[i].ne0; j++) row[j] = 2.0f * u.frand() - 1.0f;
                            ts_quantize_row(ts[i].type, row, dst + r * ts[i].row_bytes, ts[i].ne0, nullptr,
                                            0);
                        }
                        free(row);
                        const size_t pool = ts[i].row_bytes * (size_t)(ts[i].rows < 61 ? ts[i].rows : 61);
                        for (size_t have = pool; have < bytes;) {
                            const size_t n = have < bytes - have ? have : bytes - have;
                            memcpy(dst + have, dst, n);
                            have += n;
                        }
                    }
                    u.tick(bytes);
                    void *dp = nullptr;
                    cudaHostGetDevicePointer(&dp, dst, 0);
                    ts[i].data = dp;
                }
            }
        }
        cudaError_t se = cudaDeviceSynchronize();
        if (!u.rc && se != cudaSuccess) u.rc = cuda_err(err, errlen, "uploading the weights", se);
        rc = u.rc;
    }
    if (u.stage[0]) cudaFreeHost(u.stage[0]);
    if (u.stage[1]) cudaFreeHost(u.stage[1]);
    if (u.ev[0]) cudaEventDestroy(u.ev[0]);
    if (u.ev[1]) cudaEventDestroy(u.ev[1]);
    c->cm.weight_bytes = P.weights + (P.table_on_host ? 0 : P.table);
    c->cm.host_table_bytes = P.table_on_host ? P.table : 0;
    c->cm.ple.in_host_memory = P.table_on_host;

    // hash constants and per-head descriptors on the device
    if (!rc && hp->ple_layer >= 0) {
        const size_t nh = hp->ple_nh;
        const size_t bytes = 2 * nh * 8 + TS_MAX_NGRAM * 8 + nh * sizeof(ts_cuda_tensor);
        uint8_t *h = (uint8_t *)calloc(1, bytes);
        if (!h || (e = cudaMalloc(&c->consts, bytes)) != cudaSuccess) {
            rc = ts_errf(err, errlen, "out of memory for the PLE constants");
        } else {
            memcpy(h, hp->ple_sizes, nh * 8);
            memcpy(h + nh * 8, hp->ple_offsets, nh * 8);
            memcpy(h + 2 * nh * 8, hp->ple_mult, TS_MAX_NGRAM * 8);
            if (c->cm.ple.heads)
                memcpy(h + 2 * nh * 8 + TS_MAX_NGRAM * 8, c->cm.ple.heads, nh * sizeof(ts_cuda_tensor));
            cudaMemcpy(c->consts, h, bytes, cudaMemcpyHostToDevice);
            uint8_t *d = (uint8_t *)c->consts;
            c->cm.ple.sizes_dev = (const uint64_t *)d;
            c->cm.ple.offsets_dev = (const uint64_t *)(d + nh * 8);
            c->cm.ple.mult_dev = (const uint64_t *)(d + 2 * nh * 8);
            if (c->cm.ple.heads)
                c->cm.ple.heads_dev = (const ts_cuda_tensor *)(d + 2 * nh * 8 + TS_MAX_NGRAM * 8);
        }
        free(h);
    }

    // the runner
    if (!rc && (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        rc = cuda_err(err, errlen, "creating a stream", e);
    if (!rc) rc = ts_cu::alloc_work(c, o->plan_ctx, err, errlen);
    const size_t tab = tab_ints(N) * 4, st = (size_t)N * hp->n_layer * TS_CUDA_STATE_KINDS * sizeof(void *);
    if (!rc && ((e = cudaMalloc(&c->tab_dev, tab)) != cudaSuccess ||
                (e = cudaMalloc(&c->state_dev, st)) != cudaSuccess ||
                (e = cudaMallocHost(&c->tab_host, tab)) != cudaSuccess ||
                (e = cudaMallocHost(&c->state_host, st)) != cudaSuccess ||
                (e = cudaMallocHost(&c->logits_host, (size_t)(N < kMaxLogitRows ? N : kMaxLogitRows) *
                                                         hp->n_vocab * 4)) != cudaSuccess))
        rc = cuda_err(err, errlen, "allocating the micro-batch tables", e);
    if (!rc) {
        cudaEventCreate(&c->prof_ev[0]), cudaEventCreate(&c->prof_ev[1]);
        ts_cuda_batch &b = c->b;
        b.ids = c->tab_dev, b.pos = c->tab_dev + N, b.row_seq = c->tab_dev + 2 * N,
        b.seq_row0 = c->tab_dev + 3 * N;
        b.state = c->state_dev, b.n_layer = (int)hp->n_layer, b.max_ctx = c->scratch_ctx;
    }
    if (!rc && o->snapshot_bytes) { // last: the plan counted it, and nothing else needs it at first
        if ((e = cudaMalloc(&c->snap_mem, o->snapshot_bytes)) != cudaSuccess)
            rc = cuda_err(err, errlen, "reserving GPU memory for snapshots", e);
        else if (!(c->snap_ranges = ts_range_alloc_new(o->snapshot_bytes, kSnapAlign)))
            rc = ts_errf(err, errlen, "out of memory");
    }
    if (rc) {
        ts_cuda_ctx_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

extern "C" void ts_cuda_ctx_free(ts_cuda_ctx *c) {
    if (!c) return;
    cudaDeviceSynchronize();
    for (int64_t i = 0; c->graphs && i <= c->o.max_rows; i++)
        if (c->graphs[i]) cudaGraphExecDestroy(c->graphs[i]);
    if (c->prof_ev[0]) cudaEventDestroy(c->prof_ev[0]), cudaEventDestroy(c->prof_ev[1]);
    if (c->step_ev[0]) {
        if (c->step_n > 0)
            fprintf(stderr, "turbospark: %" PRId64 " decode graph replays, %.1f us of GPU time each\n",
                    c->step_n, 1e3 * c->step_ms / (double)c->step_n);
        cudaEventDestroy(c->step_ev[0]), cudaEventDestroy(c->step_ev[1]);
    }
    cudaFree(c->weights), cudaFree(c->consts), cudaFree(c->work_mem), cudaFree(c->tab_dev),
        cudaFree(c->state_dev), cudaFree(c->ballast), cudaFree(c->snap_mem);
    ts_range_alloc_free(c->snap_ranges);
    if (c->table_host) cudaFreeHost(c->table_host);
    if (c->tab_host) cudaFreeHost(c->tab_host);
    if (c->state_host) cudaFreeHost(c->state_host);
    if (c->logits_host) cudaFreeHost(c->logits_host);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->cm.layers), free(c->cm.ple.heads), free(c->graphs), free(c->warm);
    free(c->l_seq), free(c->l_tok), free(c->done);
    pthread_mutex_destroy(&c->mu);
    delete c;
}

extern "C" const ts_cuda_plan *ts_cuda_ctx_plan(const ts_cuda_ctx *c) {
    return &c->plan;
}
extern "C" const char *ts_cuda_ctx_device_name(const ts_cuda_ctx *c) {
    return c->device_name;
}
extern "C" int64_t ts_cuda_ctx_max_rows(const ts_cuda_ctx *c) {
    return c->o.max_rows;
}
extern "C" int64_t ts_cuda_hc_writes_deferred(const ts_cuda_ctx *c) {
    return c ? c->w.hc_defer.count : 0;
}
extern "C" int64_t ts_cuda_moe_planned_products(const ts_cuda_ctx *c) {
    return c ? c->w.moe_planned : 0;
}
extern "C" int64_t ts_cuda_moe_swiglu_staged(const ts_cuda_ctx *c) {
    return c ? c->w.swiglu_staged : 0;
}
extern "C" int64_t ts_cuda_qsa_joined(const ts_cuda_ctx *c) {
    return c ? c->w.qsa_joined : 0;
}
extern "C" int64_t ts_cuda_hc_one_reads(const ts_cuda_ctx *c) {
    return c ? c->w.hc_one : 0;
}

extern "C" void ts_cuda_set_trace(ts_cuda_ctx *c, ts_cuda_trace_fn fn, void *ctx) {
    c->trace = fn, c->trace_ctx = ctx;
}

// ---- the forward --------------------------------------------------------------------------------

namespace {

// Runs the micro-batch whose host tables are filled (n_rows rows of n_seq sequences, the first
// n_logit entries of lrows), then copies the logits of those rows into c->logits_host.
int run_micro_batch(ts_cuda_ctx *c, int n_rows, int n_seq, int n_logit, bool decode, char *err,
                    size_t errlen) {
    const ts_hparams *hp = &c->m->hp;
    const int64_t N = c->o.max_rows;
    c->b.n_rows = n_rows, c->b.n_seq = n_seq;
    cudaStream_t s = c->stream;
    cudaError_t e = cudaMemcpyAsync(c->tab_dev, c->tab_host, tab_ints(N) * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->state_dev, c->state_host,
                            (size_t)n_seq * hp->n_layer * TS_CUDA_STATE_KINDS * sizeof(void *),
                            cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) return cuda_err(err, errlen, "copying the micro-batch tables", e);

    const char *failed = nullptr;
    const bool graph = decode && c->use_graphs && !c->trace && !c->prof && n_logit == n_rows;
    bool timed = false; // a graph replay between c->step_ev's events (TURBOSPARK_CUDA_STEP_TIME)
    if (graph && c->warm[n_rows]) {
        // capture once per row count, after an eager warm-up step; a graph refused while the one-launch
        // hyper-connection reads were on (a read's launch failed, or the capture or instantiation as a whole)
        // is captured again with their next weaker launch (hc.cu)
        while (!c->graphs[n_rows]) {
            cudaGraph_t g = nullptr;
            const bool one = ts_cuda_hc_one_mode() > 0;
            e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
            if (e != cudaSuccess) return cuda_err(err, errlen, "starting a graph capture", e);
            failed = run_layers(c, n_logit);
            e = cudaStreamEndCapture(s, &g);
            if (!failed && e == cudaSuccess) e = cudaGraphInstantiate(&c->graphs[n_rows], g, 0);
            if (g) cudaGraphDestroy(g);
            if (!failed && e == cudaSuccess) break;
            cudaGetLastError();
            c->graphs[n_rows] = nullptr;
            // (not for another block's failure: a read's launch, or the graph refused as a whole)
            const bool read = !failed || strcmp(failed, kHcReadFailed) == 0;
            if (one && read && ts_cuda_hc_one_weaken()) continue;
            return failed ? ts_errf(err, errlen, "capturing the decode graph failed in %s", failed)
                          : cuda_err(err, errlen, "capturing or instantiating the decode graph", e);
        }
        timed = c->step_ev[0] != nullptr;
        if (timed) cudaEventRecord(c->step_ev[0], s);
        e = cudaGraphLaunch(c->graphs[n_rows], s);
        if (e != cudaSuccess) return cuda_err(err, errlen, "launching the decode graph", e);
        if (timed) cudaEventRecord(c->step_ev[1], s);
    } else {
        failed = run_layers(c, n_logit);
        if (failed) {
            cudaError_t le = cudaGetLastError();
            return ts_errf(err, errlen, "a CUDA launch failed in %s: %s", failed, cudaGetErrorString(le));
        }
        if (decode) c->warm[n_rows] = true;
    }
    if (n_logit > 0) {
        e = cudaMemcpyAsync(c->logits_host, c->logits, (size_t)n_logit * hp->n_vocab * 4,
                            cudaMemcpyDeviceToHost, s);
        if (e != cudaSuccess) return cuda_err(err, errlen, "copying the logits", e);
    }
    e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return cuda_err(err, errlen, "the forward pass", e);
    float ms = 0;
    if (timed && cudaEventElapsedTime(&ms, c->step_ev[0], c->step_ev[1]) == cudaSuccess)
        c->step_ms += ms, c->step_n++;
    return 0;
}

} // namespace

extern "C" int ts_cuda_forward(ts_cuda_ctx *c, ts_cuda_seq *const *q, const int32_t *const *ids,
                               const int64_t *n, int n_seq, float *const *logits, bool all_logits, char *err,
                               size_t errlen) {
    const ts_hparams *hp = &c->m->hp;
    const int64_t V = hp->n_vocab, N = c->o.max_rows, LR = N < kMaxLogitRows ? N : kMaxLogitRows;
    // check everything first: a refused call changes nothing
    if (n_seq < 0 || n_seq > N)
        return ts_errf(err, errlen, "%d sequences in one call; this context takes at most %" PRId64, n_seq,
                       N);
    for (int i = 0; i < n_seq; i++) {
        if (q[i]->c != c) return ts_errf(err, errlen, "batch entry %d belongs to another model or device", i);
        for (int j = 0; j < i; j++)
            if (q[j] == q[i])
                return ts_errf(err, errlen, "batch entries %d and %d are the same sequence", j, i);
        if (n[i] < 0 || q[i]->pos + n[i] > q[i]->n_ctx)
            return ts_errf(err, errlen,
                           "batch entry %d: %" PRId64 " more tokens do not fit its sequence (%" PRId64
                           " of %" PRId64 " used)",
                           i, n[i], q[i]->pos, q[i]->n_ctx);
        for (int64_t t = 0; t < n[i]; t++)
            if (ids[i][t] < 0 || ids[i][t] >= (int32_t)V)
                return ts_errf(err, errlen,
                               "token id %" PRId32 " at position %" PRId64
                               " is outside the vocabulary (0 to %" PRId64 ")",
                               ids[i][t], q[i]->pos + t, V - 1);
    }
    pthread_mutex_lock(&c->mu);
    ts_cuda_tc_scratch_set(c->w.tcx, c->w.tcx_bytes); // this thread's prefill products (gemm_tc.h)
    int rc = 0;
    int32_t *t_ids = c->tab_host, *t_pos = t_ids + N, *t_seq = t_ids + 2 * N, *t_row0 = t_ids + 3 * N,
            *t_lrows = t_ids + 4 * N + 1;
    // where each logit row goes: (sequence, token) of lrows[k]; tokens consumed per entry
    int *l_seq = c->l_seq;
    int64_t *l_tok = c->l_tok, *done = c->done;
    memset(done, 0, (size_t)n_seq * sizeof *done);
    int next = 0; // first entry with tokens left
    while (!rc) {
        while (next < n_seq && done[next] >= n[next]) next++;
        if (next >= n_seq) break;
        // pack: entries in order, as many tokens as fit
        int rows = 0, ns = 0, nl = 0;
        bool decode = true;
        for (int i = next; i < n_seq && rows < N; i++) {
            const int64_t left = n[i] - done[i];
            if (left <= 0) continue;
            const int64_t take = left < N - rows ? left : N - rows;
            t_row0[ns] = rows;
            memcpy(c->state_host + (size_t)ns * hp->n_layer * TS_CUDA_STATE_KINDS, q[i]->ptr,
                   (size_t)hp->n_layer * TS_CUDA_STATE_KINDS * sizeof(void *));
            for (int64_t t = 0; t < take; t++) {
                const int64_t tok = done[i] + t;
                t_ids[rows] = ids[i][tok];
                t_pos[rows] = (int32_t)(q[i]->pos + t);
                t_seq[rows] = ns;
                const bool want = logits && logits[i] && (all_logits || tok == n[i] - 1);
                if (want) t_lrows[nl] = rows, l_seq[nl] = i, l_tok[nl] = tok, nl++;
                rows++;
            }
            if (take != 1 || done[i] != 0 || n[i] != 1) decode = false;
            ns++;
        }
        t_row0[ns] = rows;
        // logits beyond LR rows: run the layers once, then the output in groups (eager)
        int first = nl < LR ? nl : (int)LR;
        rc = run_micro_batch(c, rows, ns, first, decode && nl == rows, err, errlen);
        for (int g0 = 0; !rc; g0 += (int)LR) {
            const int cnt = nl - g0 < LR ? nl - g0 : (int)LR;
            if (cnt <= 0) break;
            if (g0 > 0) { // a later group: gather, mix and project again for these rows
                cudaMemcpyAsync(c->tab_dev + 4 * N + 1, t_lrows + g0, (size_t)cnt * 4, cudaMemcpyHostToDevice,
                                c->stream);
                const int W = (int)(hp->hc_count * hp->n_embd);
                gather_rows_kernel<<<cnt, 256, 0, c->stream>>>(c->w.R, c->tab_dev + 4 * N + 1, W, c->Rsel);
                if (ts_cuda_hc_read(&c->w, &c->cm.output_hc, c->Rsel, cnt, c->xsel, nullptr, c->stream) ||
                    ts_cuda_matmul(&c->cm.output, 0, hp->n_vocab, c->xsel, cnt, c->logits, c->stream)) {
                    rc = ts_errf(err, errlen, "a CUDA launch failed computing logits");
                    break;
                }
                cudaMemcpyAsync(c->logits_host, c->logits, (size_t)cnt * V * 4, cudaMemcpyDeviceToHost,
                                c->stream);
                cudaError_t e = cudaStreamSynchronize(c->stream);
                if (e != cudaSuccess) {
                    rc = cuda_err(err, errlen, "computing logits", e);
                    break;
                }
            }
            for (int k = 0; k < cnt; k++) {
                const int i = l_seq[g0 + k];
                float *dst = all_logits ? logits[i] + l_tok[g0 + k] * V : logits[i];
                memcpy(dst, c->logits_host + (size_t)k * V, (size_t)V * 4);
            }
        }
        if (rc) break;
        // advance the sequences of this micro-batch
        int seen = 0;
        for (int i = next; i < n_seq && seen < ns; i++) {
            const int64_t left = n[i] - done[i];
            if (left <= 0) continue;
            const int64_t took = (seen + 1 < ns ? t_row0[seen + 1] : rows) - t_row0[seen];
            done[i] += took, q[i]->pos += took;
            seen++;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

extern "C" int ts_cuda_profile_step(ts_cuda_ctx *c, ts_cuda_seq *const *q, const int32_t *ids, int n_seq,
                                    double *times_ms, char *err, size_t errlen) {
    for (int k = 0; k < TS_PROF_KINDS; k++) times_ms[k] = 0;
    const int32_t **idp = (const int32_t **)malloc((size_t)n_seq * sizeof *idp);
    int64_t *n = (int64_t *)malloc((size_t)n_seq * sizeof *n);
    if (!idp || !n) {
        free(idp), free(n);
        return ts_errf(err, errlen, "out of memory");
    }
    // logits for every sequence, as a decode step computes them
    float **lp = (float **)calloc((size_t)n_seq, sizeof *lp);
    float *lbuf = (float *)malloc((size_t)n_seq * c->m->hp.n_vocab * sizeof(float));
    for (int i = 0; i < n_seq && lp && lbuf; i++)
        idp[i] = ids + i, n[i] = 1, lp[i] = lbuf + (size_t)i * c->m->hp.n_vocab;
    c->prof = times_ms;
    cudaProfilerStart(); // a range for `ncu --profile-from-start off` (no effect without a profiler)
    int rc = lp && lbuf ? ts_cuda_forward(c, q, idp, n, n_seq, lp, false, err, errlen)
                        : ts_errf(err, errlen, "out of memory");
    cudaProfilerStop();
    c->prof = nullptr;
    free(idp), free(n), free(lp), free(lbuf);
    return rc;
}

extern "C" double ts_cuda_measure_bandwidth(ts_cuda_ctx *c) {
    size_t fr = 0, to = 0;
    cudaMemGetInfo(&fr, &to);
    size_t bytes = (size_t)2 << 30;
    if (bytes > fr / 4) bytes = fr / 4 / 16 * 16;
    void *buf = nullptr;
    float *sink = nullptr;
    if (bytes < (64u << 20) || cudaMalloc(&buf, bytes) != cudaSuccess) return 0;
    cudaMalloc(&sink, sizeof(float));
    cudaMemset(buf, 0, bytes);
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    int sms = 132;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    double best = 0;
    for (int rep = 0; rep < 6; rep++) {
        cudaEventRecord(a, c->stream);
        read_bw_kernel<<<sms * 8, 512, 0, c->stream>>>((const float4 *)buf, bytes / 16, sink);
        cudaEventRecord(b, c->stream);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (rep > 0 && ms > 0 && bytes / (ms * 1e-3) > best) best = bytes / (ms * 1e-3);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaFree(buf), cudaFree(sink);
    return best;
}
