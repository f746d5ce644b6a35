// The thread-block bodies of the tiled GEMM (gemm_block) and of the expert plan
// (expert_plan_block), shared by src/cuda/gemm.cu (the kernels) and by
// tests/cuda/test_cuda_gemm_host.cu, which runs these same bodies on the CPU with one OS thread per
// CUDA thread (no GPU needed). The design is described in gemm.cu's header.
//
// A body reaches everything that differs between the two through its Env argument:
//   tid, bx, by, gy        threadIdx.x, blockIdx.x, blockIdx.y, gridDim.y
//   smem, items / psm, wsum the block's shared memory (dynamic part and the static arrays)
//   sync(), syncwarp()      __syncthreads, __syncwarp
//   cp16(dst, src)          a 16-byte cp.async (global → shared), commit(), wait0(), wait1()
//                           (cp.async.wait_group 0 / 1)
//   ld1(p), ld4(p)          read-only global loads of a float / float4
//   match_any(v), shfl_up(v, d)   the warp intrinsics (all 32 lanes call them)
#ifndef TS_CUDA_GEMM_TILE_CUH
#define TS_CUDA_GEMM_TILE_CUH

#include "cuda/gemm_decode.cuh"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

namespace ts_cu {

constexpr int kGemmBK = 32; // elements of K per step

template <int TM_, int TN_, int WM_, int WN_> struct gcfg {
    static constexpr int TM = TM_, TN = TN_, WM = WM_, WN = WN_;
    static constexpr int NT = 32 * WM * WN;            // threads
    static constexpr int BM = WM * 8 * TM;             // rows: lanes 8 over rows, TM/4 float4 groups 32 apart
    static constexpr int BN = WN * 4 * TN;             // columns: lanes 4 over columns, groups 16 apart
    static constexpr int BNP = BN + 4;                 // Bs row stride (conflict-free transposing stores)
    static constexpr int TPT = (2 * BM + NT - 1) / NT; // half-step decode tasks a thread
    static constexpr int XS = 8 * BN / NT;             // x float4s a thread per step
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are float4 groups");
    static_assert((8 * BN) % NT == 0 && (2 * BN) % 32 == 0 && BM % 32 == 0, "slot mappings");
};

struct gemm_args {
    const uint8_t *w0, *w1; // dense: W->data + row0·rb, NULL; experts: W->data, W2->data or NULL
    size_t rb;              // bytes per row (both tensors)
    int ne0;
    int n_out;  // output rows per column (P·n_part)
    int n_part; // rows of part 0 (rows ≥ n_part come from w1)
    int64_t rows_per_expert, row_off;
    int e_max; // largest expert whose rows lie inside both tensors
    const float *x;
    int64_t x_stride;
    int x_div;
    bool xvec; // x rows 16-byte aligned (float4 loads)
    float *y;
    int64_t y_stride;
    bool yvec;             // y rows 16-byte aligned (float4 stores)
    int T;                 // dense: columns (tokens)
    int dense_tiles;       // dense: ⌈T / BN⌉
    const int32_t *sorted; // experts: the plan (tiles == NULL: dense)
    const int4 *tiles;
    const int32_t *n_tiles;
};

// Dynamic shared memory of gemm_block: As, Bs, raw (the static items[BN] come on top).
template <int TYPE, class C> __host__ __device__ constexpr size_t gemm_smem_bytes() {
    return sizeof(float) * (2 * kGemmBK * C::BM + 2 * kGemmBK * C::BNP) +
           2 * static_cast<size_t>(C::BM) * gdec_row_bytes<TYPE>();
}

TS_HD int gmin(int a, int b) {
    return a < b ? a : b;
}
TS_HD int gpopc(uint32_t m) {
#ifdef __CUDA_ARCH__
    return __popc(m);
#else
    return __builtin_popcount(m);
#endif
}
TS_HD int gffs(uint32_t m) {
#ifdef __CUDA_ARCH__
    return __ffs(static_cast<int>(m));
#else
    return __builtin_ffs(static_cast<int>(m));
#endif
}

// One thread's part of the block (bx, ·) of the GEMM: tiles by, by + gy, ... (see gemm.cu).
#pragma nv_exec_check_disable
template <int TYPE, class C, class Env> TS_HD void gemm_block(const gemm_args &a, Env &env) {
    using D = gdec<TYPE>;
    constexpr int BK = kGemmBK;
    constexpr int BM = C::BM, BN = C::BN, BNP = C::BNP, NT = C::NT, TM = C::TM, TN = C::TN;
    constexpr int TPT = C::TPT, XS = C::XS;
    constexpr int RAWB = gdec_row_bytes<TYPE>(), LINES = gdec_lines<TYPE>();
    constexpr int SPC = D::KC / BK; // steps per chunk
    static_assert(D::KC % BK == 0 && RAWB % 16 == 0, "chunk layout");

    float *const As = env.smem;                                          // [2][BK][BM]
    float *const Bs = As + 2 * BK * BM;                                  // [2][BK][BNP]
    uint8_t *const raw = reinterpret_cast<uint8_t *>(Bs + 2 * BK * BNP); // [2][BM][RAWB]
    int *const items = env.items;                                        // [BN] item (token) of each column

    const int tid = env.tid, lane = tid & 31, warp = tid >> 5;
    const int rm = (warp % C::WM) * (8 * TM) + 4 * (lane & 7);  // first row of the thread tile
    const int cn = (warp / C::WM) * (4 * TN) + 4 * (lane >> 3); // first column
    const int o0 = env.bx * BM;
    const int ne0 = a.ne0, n_out = a.n_out;
    const int S = (ne0 + BK - 1) / BK;        // steps
    const int NC = (ne0 + D::KC - 1) / D::KC; // chunks
    const int n_tiles = a.tiles ? *a.n_tiles : a.dense_tiles;

    for (int q = env.by; q < n_tiles; q += env.gy) {
        int e = 0, start, cnt;
        if (a.tiles) {
            const int4 ti = a.tiles[q];
            e = ti.x;
            start = ti.y;
            cnt = ti.z;
        } else {
            start = q * BN;
            cnt = gmin(BN, a.T - start);
        }
        env.sync(); // the previous tile is done with items and every buffer
        if (tid < BN) {
            const int j = gmin(tid, cnt - 1); // columns past the tile repeat its last one (not stored)
            items[tid] = a.tiles ? a.sorted[start + j] : start + j;
        }
        env.sync();

        if (e < 0 || e > a.e_max) { // bad expert id: NaN outputs, no weight read
            const float nan = ts_cu_bits_to_float(0x7fffffffu);
            for (int idx = tid; idx < BM * cnt; idx += NT) {
                const int j = idx / BM, m = idx - j * BM;
                if (o0 + m < n_out) a.y[static_cast<int64_t>(items[j]) * a.y_stride + o0 + m] = nan;
            }
            continue;
        }
        const size_t r0 = (static_cast<size_t>(e) * static_cast<size_t>(a.rows_per_expert) +
                           static_cast<size_t>(a.row_off)) *
                          a.rb;
        const uint8_t *const p0 = a.w0 + r0;
        const uint8_t *const p1 = (a.w1 ? a.w1 : a.w0) + r0;
        // first byte of tile row m (rows past n_out repeat the last row: computed, never stored)
        auto row_of = [&](int m) -> const uint8_t * {
            const int o = gmin(o0 + m, n_out - 1);
            return o < a.n_part ? p0 + static_cast<size_t>(o) * a.rb
                                : p1 + static_cast<size_t>(o - a.n_part) * a.rb;
        };

        // this thread's decode rows (their addresses modulo 16) and x slots for the tile
        uint32_t rlo[TPT];
#pragma unroll
        for (int t = 0; t < TPT; t++)
            rlo[t] = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(row_of((tid + t * NT) % BM))) & 15u;
        const float *xp[XS];
        int xo[XS], xt[XS];
#pragma unroll
        for (int t = 0; t < XS; t++) {
            const int sg = tid + t * NT;
            xt[t] = (sg >> 1) % BN;                       // column
            xo[t] = 4 * ((sg & 1) + 2 * (sg / (2 * BN))); // element offset inside the step
            xp[t] = a.x + static_cast<int64_t>(items[xt[t]] / a.x_div) * a.x_stride;
        }

        // raw bytes of chunk c of every tile row → raw[c & 1] (aligned lines holding a byte of it)
        auto stage = [&](int c) {
            int k0, k1, b0, b1;
            gdec_chunk<TYPE>(ne0, c, k0, k1, b0, b1);
            uint8_t *dst = raw + (c & 1) * (BM * RAWB);
            for (int idx = tid; idx < BM * LINES; idx += NT) {
                const int m = idx / LINES, l = idx - m * LINES;
                const uint8_t *s0 = row_of(m) + b0;
                const uint8_t *al = s0 - (reinterpret_cast<uintptr_t>(s0) & 15u);
                if (al + 16 * l < s0 + (b1 - b0)) env.cp16(dst + m * RAWB + 16 * l, al + 16 * l);
            }
        };
        // x of step s → registers (zeros past the row's end)
        float4 xr[XS];
        auto load_x = [&](int s) {
            const int k = BK * s;
#pragma unroll
            for (int t = 0; t < XS; t++) {
                const int kk = k + xo[t];
                if (a.xvec && kk + 4 <= ne0) {
                    xr[t] = env.ld4(xp[t] + kk);
                } else {
                    xr[t].x = kk < ne0 ? env.ld1(xp[t] + kk) : 0.0f;
                    xr[t].y = kk + 1 < ne0 ? env.ld1(xp[t] + kk + 1) : 0.0f;
                    xr[t].z = kk + 2 < ne0 ? env.ld1(xp[t] + kk + 2) : 0.0f;
                    xr[t].w = kk + 3 < ne0 ? env.ld1(xp[t] + kk + 3) : 0.0f;
                }
            }
        };
        auto store_x = [&](int buf) {
            float *B = Bs + buf * (BK * BNP);
#pragma unroll
            for (int t = 0; t < XS; t++) {
                B[(xo[t] + 0) * BNP + xt[t]] = xr[t].x;
                B[(xo[t] + 1) * BNP + xt[t]] = xr[t].y;
                B[(xo[t] + 2) * BNP + xt[t]] = xr[t].z;
                B[(xo[t] + 3) * BNP + xt[t]] = xr[t].w;
            }
        };
        // weights of step s: raw[chunk & 1] → As[buf]; task τ = row τ % BM, half τ / BM
        auto decode = [&](int s, int buf) {
            const int c = s / SPC;
            int k0, k1, b0, b1;
            gdec_chunk<TYPE>(ne0, c, k0, k1, b0, b1);
            const uint8_t *src = raw + (c & 1) * (BM * RAWB);
            float *A = As + buf * (BK * BM);
#pragma unroll
            for (int t = 0; t < TPT; t++) {
                const int tau = tid + t * NT;
                if ((2 * BM) % NT != 0 && tau >= 2 * BM) break;
                const int m = tau % BM, h = tau / BM;
                const int ec = BK * s - k0 + 16 * h; // element of the chunk
                float w[16];
                D::decode16(src + m * RAWB + ((rlo[t] + static_cast<uint32_t>(b0)) & 15u), ec, k1 - (k0 + ec),
                            w);
#pragma unroll
                for (int i = 0; i < 16; i++) A[(16 * h + i) * BM + m] = w[i];
            }
        };

        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

        // prologue: chunks 0 and 1 in flight, step 0 in buffers 0
        stage(0);
        env.commit();
        if (NC > 1) stage(1);
        env.commit(); // possibly empty: group g always holds chunk g
        load_x(0);
        env.wait1(); // chunk 0 landed (this thread's lines) ...
        env.sync();  // ... and everyone's
        decode(0, 0);
        store_x(0);
        env.sync();

        for (int s = 0; s < S; s++) {
            const bool more = s + 1 < S;
            if (more) load_x(s + 1);
            {
                const float *A = As + (s & 1) * (BK * BM) + rm;
                const float *B = Bs + (s & 1) * (BK * BNP) + cn;
#pragma unroll 4
                for (int k = 0; k < BK; k++) {
                    float av[TM], bv[TN];
#pragma unroll
                    for (int g = 0; g < TM / 4; g++) {
                        const float4 v = *reinterpret_cast<const float4 *>(A + k * BM + 32 * g);
                        av[4 * g] = v.x, av[4 * g + 1] = v.y, av[4 * g + 2] = v.z, av[4 * g + 3] = v.w;
                    }
#pragma unroll
                    for (int g = 0; g < TN / 4; g++) {
                        const float4 v = *reinterpret_cast<const float4 *>(B + k * BNP + 16 * g);
                        bv[4 * g] = v.x, bv[4 * g + 1] = v.y, bv[4 * g + 2] = v.z, bv[4 * g + 3] = v.w;
                    }
#pragma unroll
                    for (int i = 0; i < TM; i++)
#pragma unroll
                        for (int j = 0; j < TN; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
                }
            }
            if (more) {
                if ((s + 1) % SPC == 0) { // step s + 1 opens chunk c1
                    const int c1 = (s + 1) / SPC;
                    env.wait0(); // chunk c1 landed ...
                    env.sync();  // ... for everyone; and raw[(c1 + 1) & 1] is read no more
                    if (c1 + 1 < NC) stage(c1 + 1);
                    env.commit();
                }
                decode(s + 1, (s + 1) & 1);
                store_x((s + 1) & 1);
            }
            env.sync();
        }

        // outputs: rows o0 + rm + 32·gi + (0..3), columns cn + 16·gj + j
#pragma unroll
        for (int gi = 0; gi < TM / 4; gi++) {
            const int ob = o0 + rm + 32 * gi;
#pragma unroll
            for (int gj = 0; gj < TN / 4; gj++) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int col = cn + 16 * gj + j;
                    if (col >= cnt) continue;
                    float *yr = a.y + static_cast<int64_t>(items[col]) * a.y_stride;
                    const float v0 = acc[4 * gi][4 * gj + j], v1 = acc[4 * gi + 1][4 * gj + j],
                                v2 = acc[4 * gi + 2][4 * gj + j], v3 = acc[4 * gi + 3][4 * gj + j];
                    if (a.yvec && ob + 4 <= n_out) {
                        *reinterpret_cast<float4 *>(yr + ob) = make_float4(v0, v1, v2, v3);
                    } else {
                        if (ob < n_out) yr[ob] = v0;
                        if (ob + 1 < n_out) yr[ob + 1] = v1;
                        if (ob + 2 < n_out) yr[ob + 2] = v2;
                        if (ob + 3 < n_out) yr[ob + 3] = v3;
                    }
                }
            }
        }
    }
}

// ---- expert plan ------------------------------------------------------------------------------------

// Shared memory of expert_plan_block for E experts and R warps (ints): cnt [R][E + 1], tot, off,
// toff [E + 2].
__host__ __device__ constexpr size_t expert_plan_smem(int64_t E, int R) {
    return sizeof(int) * (static_cast<size_t>(R + 3) * static_cast<size_t>(E + 1) + 1);
}

// The plan's group of item i: its expert, E for an id outside [0, E) (the "bad" group), −1 past the
// warp's range (valid false).
TS_HD int plan_group(const int32_t *ids, int i, bool valid, int E) {
    if (!valid) return -1;
    const int id = ids[i];
    return (id >= 0 && id < E) ? id : E;
}

// The single block (32·R threads) of the plan: see gemm.cu's header for the steps.
#pragma nv_exec_check_disable
template <class Env>
TS_HD void expert_plan_block(const int32_t *ids, int n, int E, int TT, int R, int32_t *sorted, int4 *tiles,
                             int32_t *n_tiles, Env &env) {
    const int E1 = E + 1;
    int *const cnt = env.psm;      // [R][E1]
    int *const tot = cnt + R * E1; // [E1]
    int *const off = tot + E1;     // [E1]
    int *const toff = off + E1;    // [E1 + 1]
    int(*const wsum)[32] = env.wsum;
    const int tid = env.tid, lane = tid & 31, warp = tid >> 5, nt = 32 * R;

    for (int i = tid; i < R * E1; i += nt) cnt[i] = 0;
    env.sync();

    // 1. per-range counts (warp w: items [beg, end), the group's first lane adds its size)
    const int64_t chunk = (static_cast<int64_t>(n) + R - 1) / R;
    const int beg = static_cast<int>(warp * chunk < n ? warp * chunk : n);
    const int end = static_cast<int>(beg + chunk < n ? beg + chunk : n);
    for (int base = beg; base < end; base += 32) {
        const int i = base + lane;
        const bool valid = i < end;
        const int e = plan_group(ids, i, valid, E);
        const uint32_t m = env.match_any(e);
        if (valid && lane == gffs(m) - 1) cnt[warp * E1 + e] += gpopc(m);
        env.syncwarp();
    }
    env.sync();

    // 2. offsets of the ranges inside each expert's group, group sizes
    for (int e = tid; e < E1; e += nt) {
        int run = 0;
        for (int w = 0; w < R; w++) {
            const int c = cnt[w * E1 + e];
            cnt[w * E1 + e] = run;
            run += c;
        }
        tot[e] = run;
    }
    env.sync();

    // 3. exclusive scans over experts: items (off) and tiles (toff); thread tid owns [e0, e1)
    const int seg = (E1 + nt - 1) / nt;
    const int e0 = gmin(E1, tid * seg), e1 = gmin(E1, e0 + seg);
    int si = 0, st = 0;
    for (int e = e0; e < e1; e++) {
        si += tot[e];
        st += (tot[e] + TT - 1) / TT;
    }
    int ii = si, it = st; // inclusive scans inside the warp
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int u = env.shfl_up(ii, d), v = env.shfl_up(it, d);
        if (lane >= d) ii += u, it += v;
    }
    if (lane == 31) wsum[0][warp] = ii, wsum[1][warp] = it;
    env.sync();
    if (warp == 0) {
        int u = lane < R ? wsum[0][lane] : 0, v = lane < R ? wsum[1][lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int pu = env.shfl_up(u, d), pv = env.shfl_up(v, d);
            if (lane >= d) u += pu, v += pv;
        }
        env.syncwarp();
        wsum[0][lane] = u, wsum[1][lane] = v; // inclusive through warp `lane`
    }
    env.sync();
    {
        int pi = (warp ? wsum[0][warp - 1] : 0) + ii - si, pt = (warp ? wsum[1][warp - 1] : 0) + it - st;
        for (int e = e0; e < e1; e++) {
            off[e] = pi;
            toff[e] = pt;
            pi += tot[e];
            pt += (tot[e] + TT - 1) / TT;
        }
    }
    const int total = wsum[1][R - 1];
    if (tid == 0) toff[E1] = total;
    env.sync();

    // 4. absolute start of each (range, expert), then the stable scatter
    for (int i = tid; i < R * E1; i += nt) cnt[i] += off[i % E1];
    env.sync();
    for (int base = beg; base < end; base += 32) {
        const int i = base + lane;
        const bool valid = i < end;
        const int e = plan_group(ids, i, valid, E);
        const uint32_t m = env.match_any(e);
        int pos = 0;
        if (valid) pos = cnt[warp * E1 + e] + gpopc(m & ((1u << lane) - 1u));
        env.syncwarp();
        if (valid) {
            sorted[pos] = i;
            if (lane == gffs(m) - 1) cnt[warp * E1 + e] += gpopc(m);
        }
        env.syncwarp();
    }

    // 5. the work list: tile q of the last expert e with toff[e] ≤ q
    for (int q = tid; q < total; q += nt) {
        int lo = 0, hi = E1 - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (toff[mid] <= q)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int j = q - toff[lo];
        tiles[q] = make_int4(lo < E ? lo : -1, off[lo] + j * TT, gmin(TT, tot[lo] - j * TT), j);
    }
    if (tid == 0) *n_tiles = total;
}

} // namespace ts_cu

#endif
