/* The QSA block selection on the GPU (ts_cuda_qsa_topk, src/cuda/qsa.cu) against the CPU's rule
 * (src/cpu/qsa.c: scores sorted by score descending, then index ascending; the first Kb, in ascending
 * block order): rows of up to 65,536 blocks (262,144 tokens of context in blocks of 4), scores with many
 * ties, rows that need no selection left untouched. The selections must be equal, index for index.
 *   test_cuda_qsa            the twin test (label cuda; exits 77 without a GPU)
 * Both forms: one thread block a row, and many (with a work area, as ts_cuda_qsa from 8,192 blocks on).
 *   test_cuda_qsa --bench    also the time of one row's selection at 8,192, 32,768 and 65,536 blocks, each form */
#include "bench_util.h"
#include "cuda/layers.h"
#include "model/memplan.h"
#include "test_util.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float *g_scores; /* qsort's context: the row being sorted */

static int by_score(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = g_scores[i], y = g_scores[j];
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}
static int by_index(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return i < j ? -1 : i > j;
}

/* The CPU's selection of row sc[0 .. nb) into out[0 .. Kb). */
static void reference(const float *sc, int64_t nb, int Kb, int32_t *order, int32_t *out) {
    for (int64_t b = 0; b < nb; b++) order[b] = (int32_t)b;
    g_scores = sc;
    qsort(order, (size_t)nb, sizeof *order, by_score);
    qsort(order, (size_t)Kb, sizeof *order, by_index);
    memcpy(out, order, (size_t)Kb * sizeof *out);
}

/* Scores of kind k: 0 gaussian ReLU sums (as the indexer's, ≥ 0, few exact ties); 1 eight levels (ties across
 * the Kb-th score); 2 all equal; 3 signed values on a coarse grid (negative keys too); 4 a few large scores in a
 * flat field; 5 three scores of exponents no other score has, then powers of two below 1. */
static float score(rng_t *r, int k, int64_t b) {
    switch (k) {
    case 0: {
        float s = 0;
        for (int h = 0; h < 4; h++) {
            const double d = rng_gauss(r);
            s += d > 0 ? (float)d : 0.0f;
        }
        return s / 8.0f + 0.0f;
    }
    case 1:
        return (float)(rng_u64(r) % 8) * 0.25f;
    case 2:
        return 1.5f;
    case 3:
        return (float)((int)(rng_u64(r) % 2001) - 1000) / 64.0f;
    case 4:
        return b % 97 == 5 ? 3.0f + (float)(b % 7) : 0.125f;
    default: /* distinct exponents at the front: 8, 4, 2, then 2^-k */
        return b < 3 ? (float)(8 >> b) : ldexpf(1.0f, -(int)(b % 20) - 1);
    }
}

/* One selection of `rows` rows: row i has nb[i] blocks (pos = nb·B − 1 + i mod B, as a position inside the next
 * block), scores of kind kinds[i]; one thread block a row, or (many) the many-block form. Returns the failures. */
static int run_case(const int64_t *nbs, const int *kinds, int rows, int B, int Kb, uint64_t seed, int many) {
    int64_t nbm = 1;
    for (int i = 0; i < rows; i++) nbm = nbs[i] > nbm ? nbs[i] : nbm;
    float *sc = malloc((size_t)rows * (size_t)nbm * sizeof *sc);
    int32_t *pos = malloc((size_t)rows * sizeof *pos), *sel = malloc((size_t)rows * (size_t)Kb * sizeof *sel);
    int32_t *ref = malloc((size_t)Kb * sizeof *ref), *order = malloc((size_t)nbm * sizeof *order);
    if (!sc || !pos || !sel || !ref || !order) {
        printf("FAIL: out of host memory\n");
        exit(1);
    }
    rng_t r = {seed};
    for (int i = 0; i < rows; i++) {
        pos[i] = (int32_t)(nbs[i] * B - 1 + i % B);
        for (int64_t b = 0; b < nbm; b++) sc[(size_t)i * nbm + b] = b < nbs[i] ? score(&r, kinds[i], b) : NAN;
    }
    float *d_sc;
    int32_t *d_pos, *d_sel;
    uint32_t *d_work = NULL;
    if (many) {
        /* poisoned: the selection must not depend on what the work area held */
        const size_t wb = (size_t)rows * (size_t)ts_memplan_qsa_sel_row_words(nbm) * sizeof *d_work;
        TS_CUDA_CHECK(cudaMalloc((void **)&d_work, wb));
        TS_CUDA_CHECK(cudaMemset(d_work, 0xA5, wb));
    }
    TS_CUDA_CHECK(cudaMalloc((void **)&d_sc, (size_t)rows * nbm * sizeof *d_sc));
    TS_CUDA_CHECK(cudaMalloc((void **)&d_pos, (size_t)rows * sizeof *d_pos));
    TS_CUDA_CHECK(cudaMalloc((void **)&d_sel, (size_t)rows * Kb * sizeof *d_sel));
    TS_CUDA_CHECK(cudaMemcpy(d_sc, sc, (size_t)rows * nbm * sizeof *sc, cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(d_pos, pos, (size_t)rows * sizeof *pos, cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemset(d_sel, 0xFF, (size_t)rows * Kb * sizeof *d_sel)); /* −1: "left untouched" */
    int fails = 0;
    if (ts_cuda_qsa_topk(d_sc, rows, nbm, d_pos, B, Kb, d_sel, d_work, 0) != 0) {
        printf("FAIL: the top-k launch failed\n");
        fails++;
    }
    TS_CUDA_CHECK(cudaDeviceSynchronize());
    TS_CUDA_CHECK(cudaMemcpy(sel, d_sel, (size_t)rows * Kb * sizeof *sel, cudaMemcpyDeviceToHost));
    for (int i = 0; i < rows && !fails; i++) {
        const int32_t *got = sel + (size_t)i * Kb;
        if (nbs[i] <= Kb) { /* dense: no selection */
            for (int k = 0; k < Kb; k++)
                if (got[k] != -1) {
                    printf("FAIL: row %d (nb %lld ≤ Kb %d) was written\n", i, (long long)nbs[i], Kb);
                    fails++;
                    break;
                }
            continue;
        }
        reference(sc + (size_t)i * nbm, nbs[i], Kb, order, ref);
        for (int k = 0; k < Kb; k++)
            if (got[k] != ref[k]) {
                printf("FAIL: %s, nb %lld, Kb %d, kind %d: selection %d is block %d, the CPU's %d\n",
                       many ? "many blocks a row" : "one block a row", (long long)nbs[i], Kb, kinds[i], k,
                       got[k], ref[k]);
                fails++;
                break;
            }
    }
    cudaFree(d_sc), cudaFree(d_pos), cudaFree(d_sel), cudaFree(d_work);
    free(sc), free(pos), free(sel), free(ref), free(order);
    return fails;
}

/* One row's selection at nb blocks (Kb 512, gaussian scores), one or many blocks a row: µs a selection, the
 * median of 5 runs of 50. */
static void bench(int64_t nb, int many) {
    const int Kb = 512, B = 4, reps = 50;
    float *sc = malloc((size_t)nb * sizeof *sc);
    rng_t r = {0xBE11C4ull};
    for (int64_t b = 0; b < nb; b++) sc[b] = score(&r, 0, b);
    const int32_t pos = (int32_t)(nb * B - 1);
    float *d_sc;
    int32_t *d_pos, *d_sel;
    TS_CUDA_CHECK(cudaMalloc((void **)&d_sc, (size_t)nb * sizeof *d_sc));
    TS_CUDA_CHECK(cudaMalloc((void **)&d_pos, sizeof *d_pos));
    TS_CUDA_CHECK(cudaMalloc((void **)&d_sel, (size_t)Kb * sizeof *d_sel));
    uint32_t *d_work = NULL;
    if (many)
        TS_CUDA_CHECK(
            cudaMalloc((void **)&d_work, (size_t)ts_memplan_qsa_sel_row_words(nb) * sizeof *d_work));
    TS_CUDA_CHECK(cudaMemcpy(d_sc, sc, (size_t)nb * sizeof *sc, cudaMemcpyHostToDevice));
    TS_CUDA_CHECK(cudaMemcpy(d_pos, &pos, sizeof pos, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    TS_CUDA_CHECK(cudaEventCreate(&e0));
    TS_CUDA_CHECK(cudaEventCreate(&e1));
    float t[5];
    for (int run = 0; run < 5; run++) {
        TS_CUDA_CHECK(cudaEventRecord(e0, 0));
        for (int i = 0; i < reps; i++) ts_cuda_qsa_topk(d_sc, 1, nb, d_pos, B, Kb, d_sel, d_work, 0);
        TS_CUDA_CHECK(cudaEventRecord(e1, 0));
        TS_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        TS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t[run] = ms * 1000.0f / reps;
    }
    const float med = bench_median(t, 5); /* sorts t */
    printf("bench: one row of %lld blocks, Kb %d, %s: %.2f us a selection (min %.2f, max %.2f)\n",
           (long long)nb, Kb, many ? "many blocks a row" : "one block a row", med, t[0], t[4]);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(d_sc), cudaFree(d_pos), cudaFree(d_sel), cudaFree(d_work);
    free(sc);
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("test_cuda_qsa: no CUDA device; this test runs on the GPU machine only\n");
        return 77;
    }
    int fails = 0, cases = 0;
    for (int many = 0; many < 2; many++) {
        /* the released shape (blocks of 4, Kb 512): around the one-block kernel's rounds of 1,024 scores, the
         * many-block slices of 2,048 and its threshold of 8,192, and the longest context (262,144 tokens) */
        const int64_t big[] = {513,  1000, 1024,  1025,  2048,  2049, 8191,
                               8192, 8193, 20000, 32768, 65535, 65536};
        const int nbig = (int)(sizeof big / sizeof *big);
        for (int k = 0; k < 5; k++) {
            int kinds[sizeof big / sizeof *big];
            for (int i = 0; i < nbig; i++) kinds[i] = k;
            fails += run_case(big, kinds, nbig, 4, 512, 0x7A11ull + (uint64_t)k, many);
            cases += nbig;
        }
        /* small shapes: Kb 5, blocks of 3, rows needing no selection among rows that do */
        const int64_t small[] = {5, 6, 3, 40, 1, 9000};
        const int kinds_small[] = {0, 1, 2, 3, 4, 1};
        fails += run_case(small, kinds_small, 6, 3, 5, 0x5A11ull, many);
        cases += 6;
        /* a selection decided at the first digit (the Kb-th score's bin taken whole: Kb 3 of scores 8, 4, 2, 1,
         * ...) and rows with every score in one bin until the last digit (kind 2) past many slices */
        const int64_t first[] = {9000, 16385};
        const int kinds_first[] = {5, 2};
        fails += run_case(first, kinds_first, 2, 4, 3, 0xF1257ull, many);
        cases += 2;
    }
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        for (int many = 0; many < 2; many++) {
            bench(8192, many);
            bench(32768, many);
            bench(65536, many);
        }
    if (fails) {
        printf("test_cuda_qsa: %d FAILED\n", fails);
        return 1;
    }
    printf("test_cuda_qsa: %d rows passed\n", cases);
    return 0;
}
