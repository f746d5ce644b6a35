// The layouts of the warpgroup-MMA prefill products (gemm_wg.cu), shared with their host emulation
// (tests/cuda/test_gemv_tc_emul.cu): the x record of a (row, super-block) and wgmma's canonical
// shared-memory tiles.
#ifndef TS_CUDA_GEMM_WG_CUH
#define TS_CUDA_GEMM_WG_CUH

#include "cuda/gemv_tc.cuh"

namespace ts_cu {

constexpr int kWgTok = 128;      // tokens a block: two warpgroups of 64
constexpr int kWgRows = 128;     // rows a block (each MMA's n)
constexpr int kStepBytes = 4096; // a k-step of a tile: 16 cores of 8 (tokens or rows) × 2 k-halves × 128 B
constexpr int kHalfBytes = 8 * kStepBytes;      // 8 k-steps: half a super-block
constexpr int kRec = 576;                       // bytes of an x record (row, super-block)
constexpr int kRecMin = 512, kRecScale = 544;   // its min-term rows and 2^-s
constexpr int kMinOff = kHalfBytes;             // an A stage's min-term tile (second halves)
constexpr int kScaleOff = kMinOff + kStepBytes; // an A stage's 2^-s, a float a token (second halves)
constexpr int kAStage = kScaleOff + kWgTok * 4; // an A stage
constexpr int kLbo = 128, kSbo = 256;           // the descriptors' byte offsets (k-halves, groups of 8 rows)

// Byte offset of (token or row r of a tile, k-step j, k-half kc, word t: k-slots 2t, 2t + 1 of the half) in
// a tile of 8 k-steps: core matrices of 8 rows × 16 bytes, k-halves kLbo bytes apart, groups of 8 rows
// kSbo apart (no swizzle, K-major).
TS_HD constexpr int canon(int r, int j, int kc, int t) {
    return j * kStepBytes + (r >> 3) * kSbo + kc * kLbo + (r & 7) * 16 + 4 * t;
}

// Byte offset of word t of (k-step, k-half kc) in an x record: the 8 inputs of a core-matrix row are 16
// contiguous bytes, so the GEMM gathers them with one 16-byte copy each. The unit (quarter h, j) of the
// staging writes a[2ii] (k-half 0) and a[2ii + 1] (k-half 1) of k-step 2(4j + ii) + h.
TS_HD constexpr int wg_rec_word(int step, int kc, int t) {
    return 32 * step + 16 * kc + 4 * t;
}

} // namespace ts_cu

#endif
