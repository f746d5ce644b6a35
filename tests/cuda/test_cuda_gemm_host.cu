// Host emulation of the tiled GEMM and of the expert plan (src/cuda/gemm_tile.cuh): the very
// thread-block bodies the kernels of src/cuda/gemm.cu run, executed on the CPU with one OS thread
// per CUDA thread (condition-variable barriers for __syncthreads / __syncwarp, memcpy for cp.async,
// an exchange array for the warp intrinsics). No GPU needed: it checks the tiling, the pipeline
// (chunk staging, double buffers, barriers), edge tiles, K-tails, the work list and the stable sort.
//
// Expected values: each output of the GEMM is one thread's fmaf chain over k in increasing order
// of the exactly dequantized weights (ts_dequantize_row) — so the reference below computes that
// same chain and the comparison is BIT FOR BIT (host fmaf and the GPU's FFMA are both the IEEE
// fused multiply-add). Every output is NaN-poisoned first, so an unwritten one fails; items with a
// bad expert id must come out NaN.
//
// Small shapes (each block is up to 256 OS threads): every tier-1 type × every configuration,
// rows and tokens that leave partial tiles, row0 ≠ 0, rows at every alignment, row lengths with
// several chunks and (plain types) K-tails, a grid smaller than the tile count (grid-stride loop);
// the plan with several warp ranges, skewed ids, bad ids, and both MoE layouts.
extern "C" {
#include "quant/quant.h"
}
#include "cuda/gemm_tile.cuh"

// the device compilation pass sees the host-only helpers below unused
#pragma nv_diag_suppress 177

#include <atomic>
#include <condition_variable>
#include "test_util.h"

#include <math.h>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>

using namespace ts_cu;

namespace {

// ---- the emulated block ---------------------------------------------------------------------------

struct barrier_t {
    std::mutex m;
    std::condition_variable cv;
    int n = 0, count = 0;
    long gen = 0;
    void wait() {
        std::unique_lock<std::mutex> l(m);
        const long g = gen;
        if (++count == n) {
            count = 0;
            gen++;
            cv.notify_all();
        } else {
            cv.wait(l, [&] { return gen != g; });
        }
    }
};

// cp.async as the hardware may do it: the copies of a committed group land at some point before
// the wait that covers the group: here either at the commit or at that wait (chosen at random), so
// reading staged bytes before waiting, or restaging a buffer other threads still read, shows.
struct async_copies {
    std::vector<std::pair<void *, const void *>> open;
    std::vector<std::vector<std::pair<void *, const void *>>> groups; // committed, not landed
    uint64_t rng;
    static void land(std::vector<std::pair<void *, const void *>> &g) {
        for (auto &c : g) memcpy(c.first, c.second, 16);
        g.clear();
    }
    void commit() {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if ((rng >> 33) & 1) land(open);
        groups.push_back(open);
        open.clear();
    }
    void wait(size_t keep) { // all but the `keep` most recent groups land
        while (groups.size() > keep) {
            land(groups.front());
            groups.erase(groups.begin());
        }
    }
};

struct block_state {
    barrier_t bar;
    std::vector<barrier_t> wbar; // one per warp
    std::vector<int> wvals;      // 32 per warp
    std::vector<float> smem;     // dynamic shared memory (16-byte aligned)
    int items[256];
    int wsum[2][32];
};

// The environment of the bodies. Its methods are __host__ __device__ only so that nvcc accepts the
// calls from the __host__ __device__ bodies; their device versions are empty and never used.
#ifdef __CUDA_ARCH__
#define HOST_ONLY(...)
#else
#define HOST_ONLY(...) __VA_ARGS__
#endif
struct host_env {
    int tid, bx, by, gy;
    float *smem;
    int *items;
    int *psm;
    int (*wsum)[32];
    block_state *b;
    async_copies *ac;
    TS_HD void sync() const { HOST_ONLY(b->bar.wait();) }
    TS_HD void syncwarp() const { HOST_ONLY(b->wbar[tid >> 5].wait();) }
    TS_HD void cp16(void *dst, const void *src) const { HOST_ONLY(ac->open.emplace_back(dst, src);) }
    TS_HD void commit() const { HOST_ONLY(ac->commit();) }
    TS_HD void wait0() const { HOST_ONLY(ac->wait(0);) }
    TS_HD void wait1() const { HOST_ONLY(ac->wait(1);) }
    TS_HD float ld1(const float *p) const { return *p; }
    TS_HD float4 ld4(const float *p) const {
        HOST_ONLY(if (reinterpret_cast<uintptr_t>(p) & 15u) {
            fprintf(stderr, "misaligned float4 load\n");
            abort();
        })
        return *reinterpret_cast<const float4 *>(p);
    }
    TS_HD uint32_t match_any(int v) const {
        uint32_t m = 0;
        HOST_ONLY(int *vals = &b->wvals[32 * (tid >> 5)]; vals[tid & 31] = v; syncwarp();
                  for (int l = 0; l < 32; l++) if (vals[l] == v) m |= 1u << l; syncwarp();)
        return m;
    }
    TS_HD int shfl_up(int v, int d) const {
        int r = v;
        HOST_ONLY(int *vals = &b->wvals[32 * (tid >> 5)]; vals[tid & 31] = v; syncwarp();
                  r = (tid & 31) >= d ? vals[(tid & 31) - d] : v; syncwarp();)
        return r;
    }
};

template <class F> void run_block(int nt, size_t smem_bytes, F body) {
    block_state b;
    b.bar.n = nt;
    b.wbar = std::vector<barrier_t>(static_cast<size_t>(nt / 32));
    for (auto &w : b.wbar) w.n = 32;
    b.wvals.assign(static_cast<size_t>(nt), 0);
    b.smem.assign(smem_bytes / 4 + 4, 0.0f);
    // garbage in shared memory: the bodies must not read what they did not write
    memset(b.smem.data(), 0xC7, b.smem.size() * 4);
    for (int &v : b.items) v = -12345;
    std::vector<std::thread> th;
    th.reserve(static_cast<size_t>(nt));
    for (int t = 0; t < nt; t++) th.emplace_back([&, t] { body(t, b); });
    for (auto &x : th) x.join();
}

uint64_t next_seed() {
    static std::atomic<uint64_t> s{0x2545F4914F6CDD1Dull};
    return s.fetch_add(0x9E3779B97F4A7C15ull);
}

template <int TYPE, class C> void run_gemm(const gemm_args &a, int gx, int gy) {
    for (int bx = 0; bx < gx; bx++)
        for (int by = 0; by < gy; by++)
            run_block(C::NT, gemm_smem_bytes<TYPE, C>(), [&](int t, block_state &b) {
                async_copies ac;
                ac.rng = next_seed() + static_cast<uint64_t>(t);
                host_env env = {t, bx, by, gy, b.smem.data(), b.items, nullptr, nullptr, &b, &ac};
                gemm_block<TYPE, C>(a, env);
                if (!ac.open.empty()) {
                    fprintf(stderr, "cp.async copies issued but never committed\n");
                    abort();
                }
                for (auto &g : ac.groups)
                    if (!g.empty()) {
                        fprintf(stderr, "cp.async copies never waited for\n");
                        abort();
                    }
            });
}

// ---- data ---------------------------------------------------------------------------------------------

rng_t g_rng = {0x13198A2E03707344ull};
uint64_t next_u64() {
    return rng_u64(&g_rng);
}
double next_unit() {
    return rng_unit(&g_rng);
}
double next_gauss() {
    return rng_gauss(&g_rng);
}

// A weight tensor of `rows` rows in file encoding (16-byte aligned, padded as on the device) and
// its exact dequantization.
struct tensor {
    uint32_t type;
    int ne0;
    int64_t rows;
    size_t rb;
    uint8_t *data;
    std::vector<float> deq; // rows × ne0
};

tensor make_tensor(uint32_t type, int ne0, int64_t rows) {
    tensor t;
    t.type = type;
    t.ne0 = ne0;
    t.rows = rows;
    t.rb = ts_row_size(type, ne0);
    const size_t bytes = (t.rb * static_cast<size_t>(rows) + 15) / 16 * 16 + 16;
    t.data = static_cast<uint8_t *>(aligned_alloc(16, bytes));
    memset(t.data, 0x77, bytes);
    t.deq.resize(static_cast<size_t>(rows) * ne0);
    std::vector<float> src(static_cast<size_t>(ne0));
    char err[256];
    for (int64_t r = 0; r < rows; r++) {
        const double scale = 0.05 + 2.0 * next_unit(), shift = (r % 3 == 0) ? 1.5 * scale : 0.0;
        for (int i = 0; i < ne0; i++)
            src[static_cast<size_t>(i)] = static_cast<float>(scale * next_gauss() + shift);
        if (quantize_row_any(type, src.data(), t.data + static_cast<size_t>(r) * t.rb, ne0, err,
                             sizeof err) != 0 ||
            ts_dequantize_row(type, t.data + static_cast<size_t>(r) * t.rb,
                              &t.deq[static_cast<size_t>(r) * ne0], ne0, err, sizeof err) != 0) {
            printf("quantize/dequantize failed: %s\n", err);
            exit(2);
        }
    }
    return t;
}

float *alloc_floats(size_t n) {
    float *p = static_cast<float *>(aligned_alloc(16, (n * 4 + 15) / 16 * 16 + 16));
    return p;
}

// The exact expected output: fmaf chain in increasing k.
float chain(const float *w, const float *x, int n) {
    float acc = 0.0f;
    for (int k = 0; k < n; k++) acc = fmaf(w[k], x[k], acc);
    return acc;
}

bool same_bits(float a, float b) {
    uint32_t u, v;
    memcpy(&u, &a, 4);
    memcpy(&v, &b, 4);
    return u == v;
}

// ---- dense ----------------------------------------------------------------------------------------------

template <int TYPE, class C>
int check_dense(const char *name, int ne0, int64_t rows, int64_t row0, int n_out, int T, int gy_limit) {
    tensor W = make_tensor(TYPE, ne0, rows);
    float *x = alloc_floats(static_cast<size_t>(T) * ne0);
    float *y = alloc_floats(static_cast<size_t>(T) * n_out);
    for (size_t i = 0; i < static_cast<size_t>(T) * ne0; i++) x[i] = static_cast<float>(next_gauss());
    memset(y, 0xFF, static_cast<size_t>(T) * n_out * 4); // NaN poison
    gemm_args a = {};
    a.w0 = W.data + static_cast<size_t>(row0) * W.rb;
    a.rb = W.rb;
    a.ne0 = ne0;
    a.n_out = n_out;
    a.n_part = n_out;
    a.x = x;
    a.x_stride = ne0;
    a.x_div = 1;
    a.xvec = ne0 % 4 == 0;
    a.y = y;
    a.y_stride = n_out;
    a.yvec = n_out % 4 == 0;
    a.T = T;
    a.dense_tiles = (T + C::BN - 1) / C::BN;
    const int gx = (n_out + C::BM - 1) / C::BM;
    const int gy = a.dense_tiles < gy_limit ? a.dense_tiles : gy_limit;
    run_gemm<TYPE, C>(a, gx, gy);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int o = 0; o < n_out; o++) {
            const float want =
                chain(&W.deq[static_cast<size_t>(row0 + o) * ne0], x + static_cast<size_t>(t) * ne0, ne0);
            const float got = y[static_cast<size_t>(t) * n_out + o];
            if (!same_bits(want, got)) {
                if (bad < 3)
                    printf("  %s BM %d BN %d ne0 %d n_out %d T %d: y[%d, %d] = %.9g, want %.9g\n", name,
                           C::BM, C::BN, ne0, n_out, T, t, o, got, want);
                bad++;
            }
        }
    free(W.data);
    free(x);
    free(y);
    return bad ? 1 : 0;
}

template <int TYPE> int check_dense_type(const char *name) {
    using D = gdec<TYPE>;
    // several chunks and a partial one; plain types: a K-tail inside a step, and (odd lengths)
    // x rows that are not 16-byte aligned
    const int ne0 = D::PLAIN ? (TYPE == TS_TYPE_F32 ? 200 : 301) : (D::QK == 256 ? 768 : 416);
    int bad = 0;
    bad += check_dense<TYPE, gcfg<8, 8, 2, 4>>(name, ne0, 300, 7, 130, 131, 65535); // 2 × 2 blocks
    bad += check_dense<TYPE, gcfg<8, 4, 2, 4>>(name, ne0, 300, 0, 131, 70, 1);      // grid-stride over tiles
    bad += check_dense<TYPE, gcfg<4, 4, 2, 4>>(name, ne0, 200, 3, 66, 65, 65535);
    bad += check_dense<TYPE, gcfg<4, 8, 4, 1>>(name, ne0, 140, 1, 129, 33, 65535);
    bad += check_dense<TYPE, gcfg<4, 4, 4, 1>>(name, ne0, 140, 5, 128, 17, 65535);
    bad += check_dense<TYPE, gcfg<4, 4, 4, 1>>(name, ne0, 9, 2, 5, 3, 65535); // n_out and T below one tile
    printf("dense  %-7s ne0 %3d: %s\n", name, ne0, bad ? "FAIL" : "bit-exact");
    return bad;
}

// ---- plan + grouped -----------------------------------------------------------------------------------

struct plan_out {
    std::vector<int32_t> sorted;
    std::vector<int4> tiles;
    int n_tiles;
};

plan_out run_plan(const std::vector<int32_t> &ids, int E, int TT, int R) {
    const int n = static_cast<int>(ids.size());
    const int E1 = E + 1;
    const int64_t groups = n < E1 ? n : E1;
    const int64_t max_tiles = (n + groups * (TT - 1)) / TT;
    plan_out p;
    p.sorted.assign(static_cast<size_t>(n), -7);
    p.tiles.assign(static_cast<size_t>(max_tiles) + 1, make_int4(-9, -9, -9, -9));
    int32_t nt = -1;
    std::vector<int> psm(expert_plan_smem(E, R) / 4 + 1, -999);
    run_block(32 * R, 0, [&](int t, block_state &b) {
        host_env env = {t, 0, 0, 1, nullptr, nullptr, psm.data(), b.wsum, &b, nullptr};
        expert_plan_block(ids.data(), n, E, TT, R, p.sorted.data(), p.tiles.data(), &nt, env);
    });
    p.n_tiles = nt;
    return p;
}

// The plan against its definition: sorted = a stable sort of the items by bucket (bad ids last),
// tiles = consecutive runs of ≤ TT items of one bucket covering sorted exactly once.
int check_plan(const std::vector<int32_t> &ids, int E, int TT, const plan_out &p) {
    const int n = static_cast<int>(ids.size());
    std::vector<int32_t> want;
    for (int e = 0; e <= E; e++)
        for (int i = 0; i < n; i++) {
            const int b = (ids[static_cast<size_t>(i)] >= 0 && ids[static_cast<size_t>(i)] < E)
                              ? ids[static_cast<size_t>(i)]
                              : E;
            if (b == e) want.push_back(i);
        }
    if (want != p.sorted) {
        printf("  plan: sorted is not the stable sort by expert\n");
        return 1;
    }
    int64_t groups = 0, expect_tiles = 0;
    for (int e = 0; e <= E; e++) {
        int c = 0;
        for (int i = 0; i < n; i++) {
            const int b = (ids[static_cast<size_t>(i)] >= 0 && ids[static_cast<size_t>(i)] < E)
                              ? ids[static_cast<size_t>(i)]
                              : E;
            c += b == e;
        }
        groups += c > 0;
        expect_tiles += (c + TT - 1) / TT;
    }
    if (p.n_tiles != expect_tiles || p.n_tiles > (n + (n < E + 1 ? n : E + 1) * (TT - 1)) / TT) {
        printf("  plan: %d tiles, expected %lld\n", p.n_tiles, static_cast<long long>(expect_tiles));
        return 1;
    }
    int pos = 0;
    for (int q = 0; q < p.n_tiles; q++) {
        const int4 t = p.tiles[static_cast<size_t>(q)];
        if (t.y != pos || t.z < 1 || t.z > TT) {
            printf("  plan: tile %d = {%d, %d, %d} does not continue at %d\n", q, t.x, t.y, t.z, pos);
            return 1;
        }
        // its index among its expert's tiles (the warpgroup products take them in pairs)
        const int4 prev = q ? p.tiles[static_cast<size_t>(q - 1)] : make_int4(-2, 0, 0, -1);
        if (t.w != (prev.x == t.x ? prev.w + 1 : 0)) {
            printf("  plan: tile %d of expert %d has index %d among its expert's tiles\n", q, t.x, t.w);
            return 1;
        }
        for (int j = 0; j < t.z; j++) {
            const int i = p.sorted[static_cast<size_t>(pos + j)];
            const int b = (ids[static_cast<size_t>(i)] >= 0 && ids[static_cast<size_t>(i)] < E)
                              ? ids[static_cast<size_t>(i)]
                              : E;
            if ((b == E ? -1 : b) != t.x) {
                printf("  plan: tile %d (expert %d) holds item %d of expert %d\n", q, t.x, i, b);
                return 1;
            }
        }
        pos += t.z;
    }
    if (pos != n || p.tiles[static_cast<size_t>(p.n_tiles)].x != -9) {
        printf("  plan: tiles cover %d of %d items (or write past the end)\n", pos, n);
        return 1;
    }
    return 0;
}

std::vector<int32_t> make_ids(int n, int E, int mode) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) {
        int e;
        if (mode == 0)
            e = static_cast<int>(next_u64() % static_cast<uint64_t>(E)); // uniform
        else if (mode == 1)
            e = static_cast<int>(next_u64() % 4 == 0 ? next_u64() % static_cast<uint64_t>(E) : 2); // skewed
        else
            e = static_cast<int>(next_u64() % static_cast<uint64_t>(E / 2 + 1)); // half the experts idle
        ids[static_cast<size_t>(i)] = e;
    }
    if (mode == 1 && n > 10) ids[5] = -1, ids[static_cast<size_t>(n - 1)] = E + 3; // bad ids
    return ids;
}

// One MoE step as ts_cuda_moe calls it: gate/up (fused: one tensor of 2F rows an expert; split: W
// and W2 of F rows) with x_div = k, then down on the items' own rows (x_div = 1).
template <int TYPE, class C>
int check_grouped(const char *name, int E, int k, int N, int H, int F, bool split, int mode, int R) {
    const int n = N * k;
    const std::vector<int32_t> ids = make_ids(n, E, mode);
    const int TT = C::BN;
    const plan_out p = run_plan(ids, E, TT, R);
    int bad = check_plan(ids, E, TT, p);
    if (bad) return 1;

    // gate/up
    const int G = 2 * F + 4 * (split ? 1 : 0); // item stride (a multiple of 4 with F % 2 == 0)
    tensor Wg = make_tensor(TYPE, H, static_cast<int64_t>(E) * (split ? F : 2 * F) + 1);
    tensor Wu = make_tensor(TYPE, H, split ? static_cast<int64_t>(E) * F : 1);
    float *x = alloc_floats(static_cast<size_t>(N) * H);
    for (size_t i = 0; i < static_cast<size_t>(N) * H; i++) x[i] = static_cast<float>(next_gauss());
    float *gu = alloc_floats(static_cast<size_t>(n) * G);
    memset(gu, 0xFF, static_cast<size_t>(n) * G * 4);
    gemm_args a = {};
    a.w0 = Wg.data;
    a.w1 = split ? Wu.data : nullptr;
    a.rb = Wg.rb;
    a.ne0 = H;
    a.n_part = split ? F : 2 * F;
    a.n_out = 2 * F;
    a.rows_per_expert = split ? F : 2 * F;
    a.row_off = 0;
    a.e_max = E - 1;
    a.x = x;
    a.x_stride = H;
    a.x_div = k;
    a.xvec = true;
    a.y = gu;
    a.y_stride = G;
    a.yvec = true;
    a.sorted = p.sorted.data();
    a.tiles = p.tiles.data();
    a.n_tiles = &p.n_tiles;
    run_gemm<TYPE, C>(a, (2 * F + C::BM - 1) / C::BM, 3);
    for (int i = 0; i < n && bad < 3; i++) {
        const int e = ids[static_cast<size_t>(i)];
        for (int o = 0; o < 2 * F; o++) {
            const float got = gu[static_cast<size_t>(i) * G + o];
            float want;
            if (e < 0 || e >= E)
                want = ts_cu_bits_to_float(0x7fffffffu);
            else if (!split)
                want = chain(&Wg.deq[(static_cast<size_t>(e) * 2 * F + o) * H],
                             x + static_cast<size_t>(i / k) * H, H);
            else if (o < F)
                want = chain(&Wg.deq[(static_cast<size_t>(e) * F + o) * H],
                             x + static_cast<size_t>(i / k) * H, H);
            else
                want = chain(&Wu.deq[(static_cast<size_t>(e) * F + o - F) * H],
                             x + static_cast<size_t>(i / k) * H, H);
            const bool ok = (e < 0 || e >= E) ? got != got : same_bits(got, want);
            if (!ok) {
                if (bad < 3)
                    printf("  %s gate/up %s: item %d (expert %d) row %d = %.9g, want %.9g\n", name,
                           split ? "split" : "fused", i, e, o, got, want);
                bad++;
                break;
            }
        }
    }
    // down: ne0 = F, rows H an expert, x = the items' gate rows (any values will do)
    tensor Wd = make_tensor(TYPE, F, static_cast<int64_t>(E) * H);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < G; c++) gu[static_cast<size_t>(i) * G + c] = static_cast<float>(next_gauss());
    float *eo = alloc_floats(static_cast<size_t>(n) * H);
    memset(eo, 0xFF, static_cast<size_t>(n) * H * 4);
    gemm_args d = a;
    d.w0 = Wd.data;
    d.w1 = nullptr;
    d.rb = Wd.rb;
    d.ne0 = F;
    d.n_part = H;
    d.n_out = H;
    d.rows_per_expert = H;
    d.e_max = E - 1;
    d.x = gu;
    d.x_stride = G;
    d.x_div = 1;
    d.y = eo;
    d.y_stride = H;
    d.yvec = H % 4 == 0;
    run_gemm<TYPE, C>(d, (H + C::BM - 1) / C::BM, 2);
    for (int i = 0; i < n && bad < 3; i++) {
        const int e = ids[static_cast<size_t>(i)];
        for (int o = 0; o < H; o++) {
            const float got = eo[static_cast<size_t>(i) * H + o];
            const bool badid = e < 0 || e >= E;
            const float want = badid ? 0.0f
                                     : chain(&Wd.deq[(static_cast<size_t>(e) * H + o) * F],
                                             gu + static_cast<size_t>(i) * G, F);
            if (badid ? got == got : !same_bits(got, want)) {
                if (bad < 3)
                    printf("  %s down: item %d (expert %d) row %d = %.9g, want %.9g\n", name, i, e, o, got,
                           want);
                bad++;
                break;
            }
        }
    }
    free(Wg.data);
    free(Wu.data);
    free(Wd.data);
    free(x);
    free(gu);
    free(eo);
    return bad ? 1 : 0;
}

template <int TYPE> int check_grouped_type(const char *name) {
    using D = gdec<TYPE>;
    const int H = D::QK == 256 ? 512 : 160, F = D::QK == 256 ? 256 : 96;
    int bad = 0;
    // E 7, k 3, N 23: 69 items; R 32 and R 3 (several items a warp range)
    bad += check_grouped<TYPE, gcfg<4, 4, 4, 1>>(name, 7, 3, 23, H, F, false, 1, 32);
    bad += check_grouped<TYPE, gcfg<4, 4, 4, 1>>(name, 7, 3, 23, H, F, true, 0, 3);
    bad += check_grouped<TYPE, gcfg<4, 8, 4, 1>>(name, 5, 2, 40, H, F, true, 2, 2);
    bad += check_grouped<TYPE, gcfg<8, 4, 2, 4>>(name, 3, 2, 50, H, F, false, 1, 1);
    printf("grouped %-7s H %3d F %3d: %s\n", name, H, F, bad ? "FAIL" : "bit-exact");
    return bad;
}

int check_plans() {
    int bad = 0;
    // larger plans only (no GEMM): many experts, many items, small R
    const int cfgs[][4] = {{64, 1000, 16, 32}, {64, 1000, 16, 5},  {200, 3000, 32, 7}, {10, 5, 16, 32},
                           {4, 0, 16, 2},      {512, 640, 16, 32}, {33, 2000, 64, 31}};
    for (const auto &c : cfgs)
        for (int mode = 0; mode < 3; mode++) {
            const std::vector<int32_t> ids = make_ids(c[1], c[0], mode);
            bad += check_plan(ids, c[0], c[2], run_plan(ids, c[0], c[2], c[3]));
        }
    printf("plans (stable sort, work list): %s\n", bad ? "FAIL" : "ok");
    return bad;
}

} // namespace

int main(int argc, char **argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int bad = check_plans();
#define TYPE_CASE(T, name)                                                                                   \
    bad += check_dense_type<T>(name);                                                                        \
    bad += check_grouped_type<T>(name);
    TYPE_CASE(TS_TYPE_Q4_K, "q4_K")
    TYPE_CASE(TS_TYPE_Q8_0, "q8_0")
    TYPE_CASE(TS_TYPE_F16, "f16")
    TYPE_CASE(TS_TYPE_IQ2_XXS, "iq2_xxs")
    if (!quick) {
        TYPE_CASE(TS_TYPE_F32, "f32")
        TYPE_CASE(TS_TYPE_BF16, "bf16")
        TYPE_CASE(TS_TYPE_Q4_0, "q4_0")
        TYPE_CASE(TS_TYPE_Q4_1, "q4_1")
        TYPE_CASE(TS_TYPE_Q5_0, "q5_0")
        TYPE_CASE(TS_TYPE_Q5_1, "q5_1")
        TYPE_CASE(TS_TYPE_IQ4_NL, "iq4_nl")
        TYPE_CASE(TS_TYPE_IQ4_XS, "iq4_xs")
        TYPE_CASE(TS_TYPE_Q5_K, "q5_K")
        TYPE_CASE(TS_TYPE_Q6_K, "q6_K")
        TYPE_CASE(TS_TYPE_Q2_K, "q2_K")
        TYPE_CASE(TS_TYPE_Q3_K, "q3_K")
        TYPE_CASE(TS_TYPE_IQ2_XS, "iq2_xs")
        TYPE_CASE(TS_TYPE_IQ2_S, "iq2_s")
        TYPE_CASE(TS_TYPE_IQ3_XXS, "iq3_xxs")
        TYPE_CASE(TS_TYPE_IQ3_S, "iq3_s")
        TYPE_CASE(TS_TYPE_IQ1_S, "iq1_s")
        TYPE_CASE(TS_TYPE_IQ1_M, "iq1_m")
    }
#undef TYPE_CASE
    printf(bad ? "test_cuda_gemm_host: FAILED\n" : "test_cuda_gemm_host: all emulated GEMMs bit-exact\n");
    return bad ? 1 : 0;
}
