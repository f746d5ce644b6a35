// The layouts of the warpgroup-MMA prefill products (gemm_wg.cu), shared with their host emulation
// (tests/cuda/test_gemv_tc_emul.cu): wgmma's canonical shared-memory tiles and x's chunks of them.
#ifndef TS_CUDA_GEMM_WG_CUH
#define TS_CUDA_GEMM_WG_CUH

#include "cuda/gemv_tc.cuh"

namespace ts_cu {

constexpr int kWgTok = 128;      // tokens a block: two warpgroups of 64
constexpr int kWgRows = 128;     // rows a block (each MMA's n)
constexpr int kStepBytes = 4096; // a k-step of a tile: 16 cores of 8 (tokens or rows) × 2 k-halves × 128 B
constexpr int kHalfBytes = 8 * kStepBytes; // 8 k-steps: half a super-block
constexpr int kLbo = 128, kSbo = 256;      // the descriptors' byte offsets (k-halves, groups of 8 rows)

// Byte offset of (token or row r of a tile, k-step j, k-half kc, word t: k-slots 2t, 2t + 1 of the half) in
// a tile of 8 k-steps: core matrices of 8 rows × 16 bytes, k-halves kLbo bytes apart, groups of 8 rows
// kSbo apart (no swizzle, K-major).
TS_HD constexpr int canon(int r, int j, int kc, int t) {
    return j * kStepBytes + (r >> 3) * kSbo + kc * kLbo + (r & 7) * 16 + 4 * t;
}

// x in chunks: one per (tile of 128 x rows, group of the type: HS k-steps a half). A chunk holds, for each
// half of the group, its HS k-steps as the canonical A tile of the tile's rows, then (K-quants, HS = 8) the
// min-term tile (the sub-block sums' hi and lo words as k-halves 0 and 1), then 2^-s a row. The A stage of a
// group's first half is the chunk's first HALF bytes, of its second half the rest: each one contiguous copy.
template <int HS> struct wg_chunk {
    static constexpr int HALF = HS * kStepBytes;
    static constexpr int MIN = 2 * HALF;
    static constexpr int SCALE = HS == 8 ? MIN + kStepBytes : MIN;
    static constexpr int BYTES = SCALE + kWgTok * 4;
    static constexpr int STAGE = BYTES - HALF; // an A stage (the second half's copy)
};

// Byte offset in its chunk of word t (k-slots 2t, 2t + 1 of k-half kc) of k-step `step` (0 .. 2·HS − 1) of
// the group, row r (0 .. 127) of the tile.
template <int HS> TS_HD constexpr int wg_x_word(int r, int step, int kc, int t) {
    return (step / HS) * wg_chunk<HS>::HALF + canon(r, step % HS, kc, t);
}

} // namespace ts_cu

#endif
