// The QSA attention of a micro-batch of many rows on the tensor cores (launch 5 of qsa.cu): the same
// work, lists and outputs as qsa_attn_kernel, the products on TF32 MMAs at about fp32's precision.
// Included by qsa.cu inside its anonymous namespace, after qsa_shape, allowed_count, the K/V records
// and the warp helpers.
//
// qsa_attn_tc_kernel<HD>, grid (N, nkv, nsplit), kTcThreads = 128 (4 warps): one kv head of one row and
// all G ≤ 16 of its query heads (the MMA's 16 rows; rows G .. 15 are zero), one split of the row's
// allowed positions, walked in sub-chunks of kAttCh = 32 positions with the online softmax of
// qsa_attn_kernel. Per sub-chunk:
//   1. the 32 positions' K and V records (fp16 values, from the cache) are gathered into shared memory
//      by cp.async (K first, then V: the scores wait for K only), their inverse scales beside them;
//   2. scores: warp w computes S[h][8w .. 8w + 7] = Σ_d Q[h][d]·K[8w + ·][d] by mma.m16n8k8 TF32 over
//      HD / 8 steps of d. Q (rounded by the prep kernel) and the records' fp16 values are exact in
//      TF32, so one MMA a step computes every product exactly, summed in fp32; S times the position's
//      K scale;
//   3. the online softmax of qsa_attn_kernel (a warp per head, a lane per position, fp32, expf);
//   4. o[h][d] += Σ_t P[h][t]·v[t][d], P times the position's V scale (a power of two) split as
//      hi = tf32(x), lo = tf32(x − hi) (about 22 bits), the fp16 values of V exact: hi·v + lo·v in two
//      fp32 accumulators, warp w owning the head dims w·HD/4 .. + HD/4 (HD/32 MMA n-tiles of 8 dims),
//      its accumulators rescaled per head first.
// Rows past the sub-chunk's count get zero K/V rows, zero scales and P = 0. The output (final or a
// split's partial) is qsa_attn_kernel's. Shared memory: Q, K and V of one sub-chunk, P: ~51 KiB at HD
// 256. Row strides HD + 4 floats (Q, P: 36) and HD + 8 halves (K, V) put the fragments' loads on
// distinct banks.

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

template <int HD> struct tc_att_smem { // offsets in floats; KS, VS in halves
    static constexpr int QS = HD + 4, KS = HD + 8, VS = HD + 8, PS = kAttCh + 4;
    static constexpr int Q = 0, K = Q + 16 * QS, V = K + kAttCh * KS / 2, P = V + kAttCh * VS / 2,
                         M = P + 16 * PS, L = M + 16, C = L + 16, IK = C + 16, IV = IK + kAttCh,
                         POS = IV + kAttCh;
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
    float *q_s = sm + L::Q, *p_s = sm + L::P;
    __half *ks = reinterpret_cast<__half *>(sm + L::K), *vs = reinterpret_cast<__half *>(sm + L::V);
    float *m_s = sm + L::M, *l_s = sm + L::L, *c_s = sm + L::C, *ik_s = sm + L::IK, *iv_s = sm + L::IV;
    int64_t *pos_s = reinterpret_cast<int64_t *>(sm + L::POS);

    const int r = blockIdx.x, j = blockIdx.y, split = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int nh = q.nh, gh = q.G, h0 = j * q.G;

    att_row ar;
    if (!att_row_begin(b, l, q, sel, all_dense, nsplit, r, j, split, h0, gh, part_ml, ar)) return;
    const float scale = 1.0f / sqrtf((float)HD);

    // Q (rows gh .. 15 zero; its values fp16's, exact in TF32), P zero (rows gh .. 15 stay so), the
    // running max and sum
    const float *qrow = qg + (int64_t)r * nh * 2 * HD;
    for (int i = tid; i < 16 * HD; i += kTcThreads) {
        const int h = i / HD, d = i - h * HD;
        q_s[h * L::QS + d] = h < gh ? qrow[(int64_t)(h0 + h) * 2 * HD + d] : 0.0f;
    }
    for (int i = tid; i < 16 * L::PS; i += kTcThreads) p_s[i] = 0.0f;
    if (tid < 16) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;

    float ohi[NT][4] = {}, olo[NT][4] = {}; // o[head g / g + 8][dims n0 + 2·t4, + 1] of n-tile i
    for (int64_t c0 = ar.a0; c0 < ar.a1; c0 += kAttCh) {
        const int cnt = (int)(ar.a1 - c0 < kAttCh ? ar.a1 - c0 : kAttCh);
        if (tid < kAttCh) { // positions and scales; past cnt scale 0
            const int64_t pos = tid < cnt ? allowed_position(q, ar.selr, ar.dense, ar.nb, c0 + tid) : 0;
            pos_s[tid] = pos;
            ik_s[tid] = tid < cnt ? kv_inv(ar.K + pos * ar.rs, q) : 0.0f;
            iv_s[tid] = tid < cnt ? kv_inv(ar.V + pos * ar.rs, q) : 0.0f;
        }
        __syncthreads(); // pos_s and the scales ready (and, the first time, Q, P, m, l)

        // 1. gather: K records' values (one commit group), then V's (another); rows past cnt zero
        auto gather = [&](__half *dst, int stride, const uint8_t *src) {
            constexpr int LPR = HD / 8; // 16-byte lines a row (8 halves)
            for (int i = tid; i < kAttCh * LPR; i += kTcThreads) {
                const int tt = i / LPR, c = (i - tt * LPR) * 8;
                if (tt < cnt)
                    ts_cu::cp_async16(dst + tt * stride + c, src + pos_s[tt] * ar.rs + 2 * c);
                else
                    *reinterpret_cast<uint4 *>(dst + tt * stride + c) = make_uint4(0u, 0u, 0u, 0u);
            }
            ts_cu::cp_async_commit();
        };
        gather(ks, L::KS, ar.K);
        gather(vs, L::VS, ar.V);
        ts_cu::cp_async_wait<1>();
        __syncthreads(); // K landed

        // 2. scores of positions 8·warp .. + 7
        {
            float sc[4] = {};
            const __half *kr = ks + (8 * warp + g) * L::KS + t4;
#pragma unroll 4
            for (int k0 = 0; k0 < HD; k0 += 8) {
                uint32_t a[4];
                a_frag(q_s + g * L::QS + k0 + t4, L::QS, a);
                mma_tf32(sc, a, __float_as_uint(__half2float(kr[k0])),
                         __float_as_uint(__half2float(kr[k0 + 4])));
            }
            // heads g and g + 8, positions 8·warp + 2·t4 and + 1
            const int c = 8 * warp + 2 * t4;
            const float k0s = ik_s[c] * scale, k1s = ik_s[c + 1] * scale;
            if (g < gh) p_s[g * L::PS + c] = sc[0] * k0s, p_s[g * L::PS + c + 1] = sc[1] * k1s;
            if (g + 8 < gh)
                p_s[(g + 8) * L::PS + c] = sc[2] * k0s, p_s[(g + 8) * L::PS + c + 1] = sc[3] * k1s;
        }
        __syncthreads();

        // 3. online softmax: a warp per head, a lane per position
        online_softmax_step(p_s, L::PS, iv_s, m_s, l_s, c_s, gh, cnt, kTcThreads / 32);
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
                const __half *vr = vs + (k0 + t4) * L::VS + warp * (HD / 4) + g;
#pragma unroll
                for (int i = 0; i < NT; i++) {
                    const uint32_t b0 = __float_as_uint(__half2float(vr[8 * i]));
                    const uint32_t b1 = __float_as_uint(__half2float(vr[8 * i + 4 * L::VS]));
                    mma_tf32(ohi[i], ah, b0, b1);
                    mma_tf32(olo[i], al, b0, b1);
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
