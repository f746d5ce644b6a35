// The QSA block selection (launch 4b of qsa.cu): the exact top Kb of a row's block scores, by one thread block a
// row (qsa_topk_kernel) or by many (qsa_sel_*_kernel, from TS_MEMPLAN_QSA_SEL_MIN blocks a row); launch_select
// enqueues either. Included by qsa.cu inside its anonymous namespace, after qsa_shape and kFull.

// ---- 4b. exact top-Kb -------------------------------------------------------------------------

// Unsigned key with the order of the float (larger key = larger score).
__device__ __forceinline__ uint32_t order_key(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One digit of the radix select, by one whole warp: the bin of hist[0 .. 256) that holds the k-th largest
// key, how many keys lie in the bins above it, and whether that bin is taken whole (no ties left to resolve).
// Every lane gets the result. Lane l owns bins 255 − 8l … 248 − 8l (descending); hist may be in shared or
// global memory.
struct radix_choice {
    uint32_t digit, above, done;
};
__device__ __forceinline__ radix_choice radix_digit(const uint32_t *hist, uint32_t k, int lane) {
    uint32_t c[8], sum = 0;
#pragma unroll
    for (int t = 0; t < 8; t++) c[t] = hist[255 - 8 * lane - t], sum += c[t];
    uint32_t incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += v;
    }
    const uint32_t excl = incl - sum;
    const bool mine = excl < k && k <= incl; // exactly one lane
    radix_choice ch = {0u, excl, 0u};
    if (mine) {
        int t = 0;
        while (ch.above + c[t] < k) ch.above += c[t], t++;
        ch.digit = 255u - 8u * lane - (uint32_t)t;
        ch.done = ch.above + c[t] == k;
    }
    const int src = __ffs(__ballot_sync(kFull, mine)) - 1;
    ch.digit = __shfl_sync(kFull, ch.digit, src);
    ch.above = __shfl_sync(kFull, ch.above, src);
    ch.done = __shfl_sync(kFull, ch.done, src);
    return ch;
}

// One round of the ordered compaction over a block of WARPS warps, one score a thread: take a key whose
// masked value is above the prefix, or equal to it and among the first k equal ones (in index order, counting
// carry_eq equal ones before this round); taken scores go to out[carry_take + their rank] in index order.
// w_eq, w_take: shared, WARPS counts each. Every thread of the block calls it.
template <int WARPS>
__device__ __forceinline__ void compact_round(int64_t i, bool valid, uint32_t km, uint32_t prefix, uint32_t k,
                                              uint32_t &carry_eq, uint32_t &carry_take, int32_t *out,
                                              uint32_t *w_eq, uint32_t *w_take) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned lt = (1u << lane) - 1u;
    const bool gt = valid && km > prefix, eq = valid && km == prefix;
    const unsigned beq = __ballot_sync(kFull, eq);
    if (lane == 0) w_eq[warp] = __popc(beq);
    __syncthreads();
    uint32_t eq_before = carry_eq + __popc(beq & lt), eq_all = 0;
    for (int w = 0; w < WARPS; w++) {
        if (w < warp) eq_before += w_eq[w];
        eq_all += w_eq[w];
    }
    const bool take = gt || (eq && eq_before < k);
    const unsigned btake = __ballot_sync(kFull, take);
    if (lane == 0) w_take[warp] = __popc(btake);
    __syncthreads();
    uint32_t at = carry_take + __popc(btake & lt), take_all = 0;
    for (int w = 0; w < WARPS; w++) {
        if (w < warp) at += w_take[w];
        take_all += w_take[w];
    }
    if (take) out[at] = (int32_t)i;
    carry_eq += eq_all, carry_take += take_all;
    __syncthreads(); // w_eq / w_take are rewritten next round
}

// Adds the keys of sc[i] (i < n) that match prefix under mask into hist[(key >> shift) & 255], a warp's equal
// bins as one atomic. Every lane of the warp calls it with the same trip count.
__device__ __forceinline__ void hist_add(uint32_t *hist, const float *sc, int64_t i, int64_t n,
                                         uint32_t prefix, uint32_t mask, int shift, int lane) {
    uint32_t bin = 256; // no bin
    if (i < n) {
        const uint32_t key = order_key(sc[i]);
        if ((key & mask) == prefix) bin = (key >> shift) & 255u;
    }
    const unsigned peers = __match_any_sync(kFull, bin);
    if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], (uint32_t)__popc(peers));
}

// One thread block a row.
__global__ void __launch_bounds__(kTopkThreads)
    qsa_topk_kernel(ts_cuda_batch b, qsa_shape q, int r0, const float *__restrict__ scores,
                    int32_t *__restrict__ sel) {
    __shared__ uint32_t hist[256];
    __shared__ radix_choice s_ch;
    __shared__ uint32_t w_eq[kTopkWarps], w_take[kTopkWarps];
    const int r = r0 + blockIdx.x;
    const int64_t p = b.pos[r], nb = (p + 1) / q.B;
    if (nb <= q.Kb) return;
    const int tid = threadIdx.x, lane = tid & 31;
    const float *sc = scores + (int64_t)blockIdx.x * q.nbm;
    int32_t *out = sel + (int64_t)r * q.Kb;

    // Radix select, most significant digit first: find the key prefix of the Kb-th largest score.
    // k = how many of the keys matching the prefix still have to be taken.
    uint32_t prefix = 0, mask = 0, k = (uint32_t)q.Kb;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += kTopkThreads) hist[i] = 0;
        __syncthreads();
        for (int64_t base = 0; base < nb; base += kTopkThreads) // uniform trip count (match_any)
            hist_add(hist, sc, base + tid, nb, prefix, mask, shift, lane);
        __syncthreads();
        if (tid < 32) {
            const radix_choice ch = radix_digit(hist, k, lane);
            if (lane == 0) s_ch = ch;
        }
        __syncthreads();
        const radix_choice ch = s_ch;
        prefix |= ch.digit << shift;
        mask |= 0xffu << shift;
        k -= ch.above;
        if (ch.done) break; // uniform
    }

    // Ordered compaction: take key-prefix > prefix, and the first k (lowest indices) equal to it.
    uint32_t carry_eq = 0, carry_take = 0;
    for (int64_t base = 0; base < nb && carry_take < (uint32_t)q.Kb; base += kTopkThreads) {
        const int64_t i = base + tid;
        const bool valid = i < nb;
        compact_round<kTopkWarps>(i, valid, valid ? order_key(sc[i]) & mask : 0u, prefix, k, carry_eq,
                                  carry_take, out, w_eq, w_take);
    }
}

// The same selection over many thread blocks a row (rows of ≥ TS_MEMPLAN_QSA_SEL_MIN blocks): thread block g
// of a row takes the scores [g·kSelSlice, (g+1)·kSelSlice) ∩ [0, nb). Per row, work holds the four digit
// histograms hist[d][256] (zeroed before the first digit) and two counts a thread block (cnt[g] = above the
// threshold, equal to it), ts_memplan_qsa_sel_row_words words. Launches, in stream order, on grid
// (⌈nbm / kSelSlice⌉, rows):
//   qsa_sel_hist_kernel ×4   digit d: every block derives the prefix of digits < d from hist[0 .. d) (as the one-
//                            block kernel chooses them) and adds its slice's histogram of digit d into hist[d];
//                            nothing once an earlier digit's bin was taken whole
//   qsa_sel_count_kernel     every block derives the final prefix and counts its slice's keys above / equal
//   qsa_sel_write_kernel     block g starts its ordered compaction after Σ_{g'<g} above + min(k, Σ_{g'<g} equal)
//                            taken and Σ_{g'<g} equal seen: the one-block kernel's set, in its order
constexpr int kSelThreads = 256;
constexpr int kSelWarps = kSelThreads / 32;
constexpr int kSelSlice = TS_MEMPLAN_QSA_SEL_SLICE;
static_assert(kSelSlice % kSelThreads == 0, "a slice is whole rounds of the block");

// The selection state after the first `digits` digits of a row's histograms, as every block of the row derives it.
struct sel_state {
    uint32_t prefix, mask, k, done;
};
__device__ __forceinline__ sel_state sel_state_after(const uint32_t *hist, int digits, int Kb) {
    __shared__ sel_state s_st;
    if (threadIdx.x < 32) {
        sel_state st = {0u, 0u, (uint32_t)Kb, 0u};
        for (int d = 0; d < digits && !st.done; d++) {
            const radix_choice ch = radix_digit(hist + 256 * d, st.k, threadIdx.x);
            const int shift = 24 - 8 * d;
            st.prefix |= ch.digit << shift, st.mask |= 0xffu << shift;
            st.k -= ch.above, st.done = ch.done;
        }
        if (threadIdx.x == 0) s_st = st;
    }
    __syncthreads();
    return s_st;
}

// The row of blockIdx.y, its block count and its slice; false when the row needs no selection or the slice is
// empty (uniform over the block).
__device__ __forceinline__ bool sel_slice(const ts_cuda_batch &b, const qsa_shape &q, int r0, int64_t *nb,
                                          int64_t *i0, int64_t *i1) {
    const int64_t p = b.pos[r0 + blockIdx.y];
    *nb = (p + 1) / q.B;
    *i0 = (int64_t)blockIdx.x * kSelSlice;
    *i1 = *i0 + kSelSlice < *nb ? *i0 + kSelSlice : *nb;
    return *nb > q.Kb && *i0 < *nb;
}

__global__ void __launch_bounds__(kSelThreads)
    qsa_sel_hist_kernel(ts_cuda_batch b, qsa_shape q, int r0, const float *__restrict__ scores,
                        uint32_t *__restrict__ work, int64_t row_words, int digit) {
    __shared__ uint32_t hist[256];
    int64_t nb, i0, i1;
    if (!sel_slice(b, q, r0, &nb, &i0, &i1)) return;
    uint32_t *wr = work + blockIdx.y * row_words;
    const sel_state st = sel_state_after(wr, digit, q.Kb);
    if (st.done) return;
    const float *sc = scores + (int64_t)blockIdx.y * q.nbm;
    for (int i = threadIdx.x; i < 256; i += kSelThreads) hist[i] = 0;
    __syncthreads();
    for (int64_t base = i0; base < i1; base += kSelThreads)
        hist_add(hist, sc, base + threadIdx.x, i1, st.prefix, st.mask, 24 - 8 * digit, threadIdx.x & 31);
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += kSelThreads)
        if (hist[i]) atomicAdd(&wr[256 * digit + i], hist[i]);
}

__global__ void __launch_bounds__(kSelThreads)
    qsa_sel_count_kernel(ts_cuda_batch b, qsa_shape q, int r0, const float *__restrict__ scores,
                         uint32_t *__restrict__ work, int64_t row_words) {
    __shared__ uint32_t s_gt, s_eq;
    int64_t nb, i0, i1;
    if (!sel_slice(b, q, r0, &nb, &i0, &i1)) return;
    uint32_t *wr = work + blockIdx.y * row_words;
    const sel_state st = sel_state_after(wr, 4, q.Kb);
    const float *sc = scores + (int64_t)blockIdx.y * q.nbm;
    if (threadIdx.x == 0) s_gt = 0, s_eq = 0;
    __syncthreads();
    uint32_t gt = 0, eq = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += kSelThreads) {
        const uint32_t km = order_key(sc[i]) & st.mask;
        gt += km > st.prefix, eq += km == st.prefix;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) gt += __shfl_xor_sync(kFull, gt, o), eq += __shfl_xor_sync(kFull, eq, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&s_gt, gt), atomicAdd(&s_eq, eq);
    __syncthreads();
    if (threadIdx.x == 0) wr[1024 + 2 * blockIdx.x] = s_gt, wr[1024 + 2 * blockIdx.x + 1] = s_eq;
}

__global__ void __launch_bounds__(kSelThreads)
    qsa_sel_write_kernel(ts_cuda_batch b, qsa_shape q, int r0, const float *__restrict__ scores,
                         const uint32_t *__restrict__ work, int64_t row_words, int32_t *__restrict__ sel) {
    __shared__ uint32_t w_eq[kSelWarps], w_take[kSelWarps];
    int64_t nb, i0, i1;
    if (!sel_slice(b, q, r0, &nb, &i0, &i1)) return;
    const uint32_t *wr = work + blockIdx.y * row_words;
    const sel_state st = sel_state_after(wr, 4, q.Kb);
    uint32_t gt_before = 0, eq_before = 0; // over the blocks before this one (a few dozen)
    for (unsigned g = 0; g < blockIdx.x; g++)
        gt_before += wr[1024 + 2 * g], eq_before += wr[1024 + 2 * g + 1];
    const float *sc = scores + (int64_t)blockIdx.y * q.nbm;
    int32_t *out = sel + (int64_t)(r0 + blockIdx.y) * q.Kb;
    uint32_t carry_eq = eq_before, carry_take = gt_before + (eq_before < st.k ? eq_before : st.k);
    for (int64_t base = i0; base < i1 && carry_take < (uint32_t)q.Kb; base += kSelThreads) {
        const int64_t i = base + threadIdx.x;
        const bool valid = i < i1;
        compact_round<kSelWarps>(i, valid, valid ? order_key(sc[i]) & st.mask : 0u, st.prefix, st.k, carry_eq,
                                 carry_take, out, w_eq, w_take);
    }
}

// The selection of rows r0 .. r0 + rows (scores: their first row's; rows ≤ the work area's), one thread block a
// row, or many with a work area (work: rows × row_words uint32).
bool launch_select(const ts_cuda_batch &b, const qsa_shape &q, int r0, int rows, const float *scores,
                   uint32_t *work, int32_t *sel, cudaStream_t s) {
    if (!work) {
        qsa_topk_kernel<<<(unsigned)rows, kTopkThreads, 0, s>>>(b, q, r0, scores, sel);
        return cudaGetLastError() == cudaSuccess;
    }
    const int64_t row_words = ts_memplan_qsa_sel_row_words(q.nbm);
    const dim3 grid((unsigned)((q.nbm + kSelSlice - 1) / kSelSlice), (unsigned)rows);
    if (cudaMemsetAsync(work, 0, (size_t)(rows * row_words) * sizeof(uint32_t), s) != cudaSuccess)
        return false;
    for (int d = 0; d < 4; d++)
        qsa_sel_hist_kernel<<<grid, kSelThreads, 0, s>>>(b, q, r0, scores, work, row_words, d);
    qsa_sel_count_kernel<<<grid, kSelThreads, 0, s>>>(b, q, r0, scores, work, row_words);
    qsa_sel_write_kernel<<<grid, kSelThreads, 0, s>>>(b, q, r0, scores, work, row_words, sel);
    return cudaGetLastError() == cudaSuccess;
}
