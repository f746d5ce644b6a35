// The QSA attention of a micro-batch of many rows on the tensor cores (launch 5 of qsa.cu): the same
// work, lists and outputs as qsa_attn_kernel, the products as split TF32 products of about fp32's
// precision. Included by qsa.cu inside its anonymous namespace, after qsa_shape, allowed_count and the
// warp helpers.
//
// qsa_attn_tc_kernel<HD>, grid (N, nkv, nsplit), kTcThreads = 128 (4 warps): one kv head of one row and
// all G ≤ 16 of its query heads (the MMA's 16 rows; rows G .. 15 are zero), one split of the row's
// allowed positions, walked in sub-chunks of kAttCh = 32 positions with the online softmax of
// qsa_attn_kernel. Per sub-chunk:
//   1. the 32 positions' K and V rows (fp32, from the cache) are gathered into shared memory by
//      cp.async (K first, then V: the scores wait for K only);
//   2. scores: warp w computes S[h][8w .. 8w + 7] = Σ_d Q[h][d]·K[8w + ·][d] by mma.m16n8k8 TF32 over
//      HD / 8 steps of d. Each operand x is split as hi = tf32(x), lo = tf32(x − hi) (x − hi is exact
//      in fp32), and S = hi·hi + (hi·lo + lo·hi), the two sums in separate fp32 accumulators: about
//      22 bits of each operand, the dropped lo·lo term ~2^-22 of the product. Q's hi and lo are
//      staged once per block;
//   3. the online softmax of qsa_attn_kernel (a warp per head, a lane per position, fp32, expf);
//   4. o[h][d] += Σ_t P[h][t]·V[t][d] the same way, warp w owning the head dims w·HD/4 .. + HD/4
//      (HD/32 MMA n-tiles of 8 dims), its accumulators rescaled per head first.
// Rows past the sub-chunk's count get zero K/V rows and P = 0. The output (final or a split's
// partial) is qsa_attn_kernel's. Shared memory: Q hi/lo, K and V of one sub-chunk, P: ~103 KiB at HD
// 256 (two blocks an SM). Row strides HD + 4 (Q, K, P: 36) and HD + 8 (V) floats put the fragments'
// loads on distinct banks.

constexpr int kTcThreads = 128; // 4 warps
constexpr int kTcMinRows = 64;  // rows of a micro-batch from which qsa.cu takes this kernel

__device__ __forceinline__ uint32_t tf32_hi(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
// x = hi + lo to ~2^-22: lo = tf32(x − hi)
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = tf32_hi(x);
    lo = tf32_hi(x - __uint_as_float(hi));
}
// c += a·b, mma.m16n8k8 TF32 (row A 16 × 8, column B 8 × 8, fp32 C)
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A fragment of mma.m16n8k8 TF32 from shared memory already in TF32: rows g and g + 8 (row stride
// st), columns t and t + 4, with p at (g, t).
__device__ __forceinline__ void a_frag(const float *p, int st, uint32_t (&a)[4]) {
    a[0] = __float_as_uint(p[0]), a[1] = __float_as_uint(p[8 * st]);
    a[2] = __float_as_uint(p[4]), a[3] = __float_as_uint(p[8 * st + 4]);
}

template <int HD> struct tc_att_smem { // offsets in floats
    static constexpr int QS = HD + 4, KS = HD + 4, VS = HD + 8, PS = kAttCh + 4;
    static constexpr int QHI = 0, QLO = QHI + 16 * QS, K = QLO + 16 * QS, V = K + kAttCh * KS,
                         P = V + kAttCh * VS, M = P + 16 * PS, L = M + 16, C = L + 16, POS = C + 16;
    static constexpr size_t bytes = (size_t)POS * sizeof(float) + kAttCh * sizeof(int64_t);
};

template <int HD>
__global__ void __launch_bounds__(kTcThreads)
    qsa_attn_tc_kernel(ts_cuda_batch b, int l, qsa_shape q, const float *__restrict__ qg,
                       const int32_t *__restrict__ sel, int all_dense, int nsplit, float *__restrict__ att,
                       float *__restrict__ part_o, float *__restrict__ part_ml) {
    using L = tc_att_smem<HD>;
    constexpr int NT = HD / 32; // MMA n-tiles of head dims a warp owns in o
    static_assert(HD % 32 == 0, "4 warps of n-tiles of 8 head dims");
    extern __shared__ __align__(16) float sm[];
    float *qhi = sm + L::QHI, *qlo = sm + L::QLO, *ks = sm + L::K, *vs = sm + L::V, *p_s = sm + L::P;
    float *m_s = sm + L::M, *l_s = sm + L::L, *c_s = sm + L::C;
    int64_t *pos_s = reinterpret_cast<int64_t *>(sm + L::POS);

    const int r = blockIdx.x, j = blockIdx.y, split = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int nkv = q.nkv, nh = q.nh, gh = q.G, h0 = j * q.G;

    att_row ar;
    if (!att_row_begin(b, l, q, sel, all_dense, nsplit, r, j, split, h0, gh, part_ml, ar)) return;
    const int64_t kvs = (int64_t)nkv * HD;
    const float scale = 1.0f / sqrtf((float)HD);

    // Q's hi and lo parts (rows gh .. 15 zero), P zero (rows gh .. 15 stay so), the running max and sum
    const float *qrow = qg + (int64_t)r * nh * 2 * HD;
    for (int i = tid; i < 16 * HD; i += kTcThreads) {
        const int h = i / HD, d = i - h * HD;
        uint32_t hi = 0, lo = 0;
        if (h < gh) tf32_split(qrow[(int64_t)(h0 + h) * 2 * HD + d], hi, lo);
        qhi[h * L::QS + d] = __uint_as_float(hi), qlo[h * L::QS + d] = __uint_as_float(lo);
    }
    for (int i = tid; i < 16 * L::PS; i += kTcThreads) p_s[i] = 0.0f;
    if (tid < 16) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;

    float ohi[NT][4] = {}, olo[NT][4] = {}; // o[head g / g + 8][dims n0 + 2·t4, + 1] of n-tile i
    for (int64_t c0 = ar.a0; c0 < ar.a1; c0 += kAttCh) {
        const int cnt = (int)(ar.a1 - c0 < kAttCh ? ar.a1 - c0 : kAttCh);
        if (tid < cnt) pos_s[tid] = allowed_position(q, ar.selr, ar.dense, ar.nb, c0 + tid);
        __syncthreads(); // pos_s ready (and, the first time, Q, P, m, l)

        // 1. gather: K rows (one commit group), then V rows (another); rows past cnt zero
        auto gather = [&](float *dst, int stride, const float *src) {
            constexpr int LPR = HD / 4; // 16-byte lines a row
            for (int i = tid; i < kAttCh * LPR; i += kTcThreads) {
                const int tt = i / LPR, c = (i - tt * LPR) * 4;
                if (tt < cnt)
                    ts_cu::cp_async16(dst + tt * stride + c, src + pos_s[tt] * kvs + c);
                else
                    *reinterpret_cast<float4 *>(dst + tt * stride + c) = make_float4(0.f, 0.f, 0.f, 0.f);
            }
            ts_cu::cp_async_commit();
        };
        gather(ks, L::KS, ar.K);
        gather(vs, L::VS, ar.V);
        ts_cu::cp_async_wait<1>();
        __syncthreads(); // K landed

        // 2. scores of positions 8·warp .. + 7
        {
            float shi[4] = {}, slo[4] = {};
            const float *kr = ks + (8 * warp + g) * L::KS + t4;
#pragma unroll 4
            for (int k0 = 0; k0 < HD; k0 += 8) {
                uint32_t ah[4], al[4], bh0, bl0, bh1, bl1;
                const int qa = g * L::QS + k0 + t4;
                a_frag(qhi + qa, L::QS, ah), a_frag(qlo + qa, L::QS, al);
                tf32_split(kr[k0], bh0, bl0);
                tf32_split(kr[k0 + 4], bh1, bl1);
                mma_tf32(shi, ah, bh0, bh1);
                mma_tf32(slo, ah, bl0, bl1);
                mma_tf32(slo, al, bh0, bh1);
            }
            // heads g and g + 8, positions 8·warp + 2·t4 and + 1
            const int c = 8 * warp + 2 * t4;
            if (g < gh)
                p_s[g * L::PS + c] = (shi[0] + slo[0]) * scale,
                                p_s[g * L::PS + c + 1] = (shi[1] + slo[1]) * scale;
            if (g + 8 < gh)
                p_s[(g + 8) * L::PS + c] = (shi[2] + slo[2]) * scale,
                                      p_s[(g + 8) * L::PS + c + 1] = (shi[3] + slo[3]) * scale;
        }
        __syncthreads();

        // 3. online softmax: a warp per head, a lane per position
        online_softmax_step(p_s, L::PS, m_s, l_s, c_s, gh, cnt, kTcThreads / 32);
        ts_cu::cp_async_wait<0>();
        __syncthreads(); // P, the rescales and V ready

        // 4. o = o·c + P V over this warp's head dims
        {
            const float cg = g < gh ? c_s[g] : 0.0f, cg8 = g + 8 < gh ? c_s[g + 8] : 0.0f;
#pragma unroll
            for (int i = 0; i < NT; i++) {
                ohi[i][0] *= cg, ohi[i][1] *= cg, ohi[i][2] *= cg8, ohi[i][3] *= cg8;
                olo[i][0] *= cg, olo[i][1] *= cg, olo[i][2] *= cg8, olo[i][3] *= cg8;
            }
#pragma unroll
            for (int k0 = 0; k0 < kAttCh; k0 += 8) {
                uint32_t ah[4], al[4];
                const int pa = g * L::PS + k0 + t4;
                tf32_split(p_s[pa], ah[0], al[0]);
                tf32_split(p_s[pa + 8 * L::PS], ah[1], al[1]);
                tf32_split(p_s[pa + 4], ah[2], al[2]);
                tf32_split(p_s[pa + 8 * L::PS + 4], ah[3], al[3]);
                const float *vr = vs + (k0 + t4) * L::VS + warp * (HD / 4) + g;
#pragma unroll
                for (int i = 0; i < NT; i++) {
                    uint32_t bh0, bl0, bh1, bl1;
                    tf32_split(vr[8 * i], bh0, bl0);
                    tf32_split(vr[8 * i + 4 * L::VS], bh1, bl1);
                    mma_tf32(ohi[i], ah, bh0, bh1);
                    mma_tf32(olo[i], ah, bl0, bl1);
                    mma_tf32(olo[i], al, bh0, bh1);
                }
            }
        }
        __syncthreads(); // pos_s, K, V and P are rewritten by the next sub-chunk
    }

    // output: final (one split) or partial; thread has heads g, g + 8 and dims d, d + 1 of each n-tile
#pragma unroll
    for (int i = 0; i < NT; i++) {
        const int d = warp * (HD / 4) + 8 * i + 2 * t4;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int h = g + 8 * u;
            if (h >= gh) continue;
            const int hq = h0 + h;
            const float o0 = ohi[i][2 * u] + olo[i][2 * u], o1 = ohi[i][2 * u + 1] + olo[i][2 * u + 1];
            if (nsplit == 1) {
                const float *gate = qrow + (int64_t)hq * 2 * HD + HD + d;
                float *out = att + ((int64_t)r * nh + hq) * HD + d;
                out[0] = o0 / l_s[h] * ts_dsigmoid(gate[0]);
                out[1] = o1 / l_s[h] * ts_dsigmoid(gate[1]);
            } else {
                float *out = part_o + (((int64_t)r * nh + hq) * nsplit + split) * HD + d;
                out[0] = o0, out[1] = o1;
            }
        }
    }
    if (nsplit > 1 && tid < gh) {
        float *ml = part_ml + (((int64_t)r * nh + h0 + tid) * nsplit + split) * 2;
        ml[0] = m_s[tid], ml[1] = l_s[tid];
    }
}

// Launches qsa_attn_tc_kernel for head dims 32, 64, 128 and 256 with G ≤ 16 query heads a kv head:
// 1 launched, 0 not applicable (the caller takes qsa_attn_kernel: another shape, few rows, or a GPU
// without the shared memory), -1 the launch failed.
template <int HD>
int launch_tc_hd(dim3 grid, const ts_cuda_batch &b, int l, const qsa_shape &q, const float *qg,
                 const int32_t *sel, int dense, int nsplit, float *att, float *part_o, float *part_ml,
                 cudaStream_t s) {
    // the opt-in, once per head dim (outside any graph capture: the forward runs a row count eagerly
    // before it captures it): 0 not tried, 1 made, -1 refused
    thread_local int opted = 0;
    constexpr size_t smem = tc_att_smem<HD>::bytes;
    if (!opted) {
        opted = cudaFuncSetAttribute(qsa_attn_tc_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem) == cudaSuccess
                    ? 1
                    : -1;
        if (opted < 0) cudaGetLastError(); // not an error of the forward: qsa_attn_kernel runs instead
    }
    if (opted < 0) return 0;
    qsa_attn_tc_kernel<HD>
        <<<grid, kTcThreads, smem, s>>>(b, l, q, qg, sel, dense, nsplit, att, part_o, part_ml);
    return cudaPeekAtLastError() == cudaSuccess ? 1 : -1;
}

int launch_attn_tc(const ts_cuda_batch &b, int l, const qsa_shape &q, const float *qg, const int32_t *sel,
                   int dense, int nsplit, float *att, float *part_o, float *part_ml, cudaStream_t s) {
    if (q.G > 16 || b.n_rows < kTcMinRows) return 0;
    const dim3 grid((unsigned)b.n_rows, (unsigned)q.nkv, (unsigned)nsplit);
    switch (q.hd) {
    case 32:
        return launch_tc_hd<32>(grid, b, l, q, qg, sel, dense, nsplit, att, part_o, part_ml, s);
    case 64:
        return launch_tc_hd<64>(grid, b, l, q, qg, sel, dense, nsplit, att, part_o, part_ml, s);
    case 128:
        return launch_tc_hd<128>(grid, b, l, q, qg, sel, dense, nsplit, att, part_o, part_ml, s);
    case 256:
        return launch_tc_hd<256>(grid, b, l, q, qg, sel, dense, nsplit, att, part_o, part_ml, s);
    default:
        return 0;
    }
}
