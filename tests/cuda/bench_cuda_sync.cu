// What one dependent step costs on this GPU, with no work in it: the floor under every kernel boundary of a
// decode step (a batch-1 step is ~600 dependent kernels, docs/BENCHMARKS.md) and under every wait of a
// persistent kernel (issue 21's design). Each step reads the value the step before it wrote (every block, through
// L2) and block 0 writes it again plus one, so that the steps are truly ordered; the result is checked.
//
//   bench_cuda_sync [STEPS]        (STEPS: dependent steps a sample, 256 by default)
//
// Forms, each at one block an SM and at two (256 threads a block), µs a step, the median of 21 samples:
//   graph         a CUDA graph of STEPS launches, each waiting for the one before (stream order)
//   graph+PDL     the same with programmatic dependent launch: each kernel lets the next one launch at its
//                 start, and the next waits in griddepcontrol.wait (as the forward's kernels do)
//   barrier       one cooperative kernel of STEPS phases with a grid barrier between them (an arrival count
//                 and a generation, as hc.cu's one-launch read), every block waiting for every block
//   flag          one cooperative kernel in which block s mod G makes step s once the flag says step s − 1 is
//                 done, every block waiting for every step's flag (a release store, acquire loads): one
//                 producer to all, the wait of a persistent kernel's task on one other task
// Then the release delay of graph+PDL: the time from the moment the last block of a kernel finishes (globaltimer,
// read by that block) to the moment the next kernel's griddepcontrol.wait returns in its block 0.
#include "bench_util.h"
#include "cuda/pdl.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

using ts_cu::ld_acquire;

constexpr int kThreads = 256;
constexpr int kSamples = 21;

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void st_release(unsigned *p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The state the steps share: val (the value each step reads and writes), the barrier's count and generation,
// the flag, the release-delay stamps and the count of blocks done with a kernel.
struct sync_state {
    unsigned val, count, gen, flag, done;
    unsigned long long last_end;
    unsigned long long delay_sum; // ns, over the measured boundaries
    unsigned n_delay;
};

// One step of a launched chain: every block reads val (L2), block 0 writes it plus one. STAMP: the last block to
// finish stamps its end, and block 0 of the next kernel adds (its wait's return − that end) to delay_sum.
template <bool PDL, bool STAMP> __global__ void __launch_bounds__(kThreads) step_kernel(sync_state *st) {
    if (PDL) ts_cu::pdl_trigger(), ts_cu::pdl_wait(); // as the forward's kernels do
    __shared__ unsigned v;
    if (threadIdx.x == 0) {
        if (STAMP && blockIdx.x == 0) {
            const unsigned long long now = global_ns(), end = st->last_end;
            if (end != 0 && now > end) st->delay_sum += now - end, st->n_delay++;
        }
        v = __ldcg(&st->val);
    }
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x == 0) st->val = v + 1;
    if (STAMP && threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&st->done, 1u) == gridDim.x - 1) { // the last block of this kernel
            st->done = 0;
            st->last_end = global_ns();
            __threadfence();
        }
    }
}

// Every block past every block's stores before it (as hc.cu's grid_barrier).
__device__ __forceinline__ void grid_barrier(sync_state *st) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire(&st->gen);
        __threadfence();
        if (atomicAdd(&st->count, 1u) == gridDim.x - 1) {
            atomicExch(&st->count, 0u);
            __threadfence();
            atomicAdd(&st->gen, 1u);
        } else {
            while (ld_acquire(&st->gen) == gen) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// STEPS phases in one kernel. FLAG: step s is made by block s mod G, which waits (as every block does) for the
// flag to say that step s − 1 is done, then reads val, writes it plus one and releases flag = s + 1: a chain of
// one-to-all signals between blocks on different SMs. Else: block 0 makes each step and a grid barrier follows,
// after which every block reads val.
template <bool FLAG>
__global__ void __launch_bounds__(kThreads) persistent_kernel(sync_state *st, int steps) {
    __shared__ unsigned v;
    for (int s = 0; s < steps; s++) {
        if (FLAG) {
            if (threadIdx.x == 0) {
                while (ld_acquire(&st->flag) < static_cast<unsigned>(s)) {
                }
                v = __ldcg(&st->val);
                if (blockIdx.x == static_cast<unsigned>(s) % gridDim.x) {
                    st->val = v + 1;
                    st_release(&st->flag, static_cast<unsigned>(s) + 1);
                }
            }
            __syncthreads();
        } else {
            if (threadIdx.x == 0 && blockIdx.x == 0) st->val = __ldcg(&st->val) + 1;
            grid_barrier(st);
            if (threadIdx.x == 0) v = __ldcg(&st->val);
            __syncthreads();
        }
    }
}

template <class... A>
void launch(void (*kernel)(A...), int blocks, bool pdl, bool coop, cudaStream_t s, A... args) {
    cudaLaunchAttribute a[2];
    int na = 0;
    if (pdl) {
        a[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        a[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (coop) {
        a[na].id = cudaLaunchAttributeCooperative;
        a[na++].val.cooperative = 1;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(kThreads);
    cfg.stream = s;
    cfg.attrs = a;
    cfg.numAttrs = na;
    TS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// The median µs a step of `run` (which enqueues one sample of `steps` steps on s), after 3 warm-up samples;
// checks that val advanced by one a step.
template <class F> float time_steps(F run, int steps, cudaStream_t s, sync_state *st, const char *name) {
    cudaEvent_t e0, e1;
    TS_CUDA_CHECK(cudaEventCreate(&e0));
    TS_CUDA_CHECK(cudaEventCreate(&e1));
    float ms[kSamples];
    for (int i = 0; i < 3 + kSamples; i++) {
        TS_CUDA_CHECK(cudaMemsetAsync(st, 0, sizeof *st, s));
        TS_CUDA_CHECK(cudaEventRecord(e0, s));
        run();
        TS_CUDA_CHECK(cudaEventRecord(e1, s));
        TS_CUDA_CHECK(cudaEventSynchronize(e1));
        if (i >= 3) TS_CUDA_CHECK(cudaEventElapsedTime(&ms[i - 3], e0, e1));
        sync_state h;
        TS_CUDA_CHECK(cudaMemcpy(&h, st, sizeof h, cudaMemcpyDeviceToHost));
        if (h.val != static_cast<unsigned>(steps)) {
            fprintf(stderr, "bench_cuda_sync: %s made %u steps of %d\n", name, h.val, steps);
            exit(1);
        }
    }
    TS_CUDA_CHECK(cudaEventDestroy(e0));
    TS_CUDA_CHECK(cudaEventDestroy(e1));
    return 1e3f * bench_median(ms, kSamples) / static_cast<float>(steps);
}

// A graph of `steps` launches of kernel k (PDL edges where pdl).
cudaGraphExec_t chain_graph(void (*k)(sync_state *), int blocks, bool pdl, int steps, cudaStream_t s,
                            sync_state *st) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    TS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < steps; i++) launch(k, blocks, pdl, false, s, st);
    TS_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    TS_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    TS_CUDA_CHECK(cudaGraphDestroy(g));
    return e;
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 256;
    if (steps < 2 || steps > 100000) {
        fprintf(stderr, "usage: bench_cuda_sync [STEPS] (2 .. 100000 dependent steps a sample)\n");
        return 2;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        fprintf(stderr, "bench_cuda_sync: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    TS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    cudaStream_t s;
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    sync_state *st;
    TS_CUDA_CHECK(cudaMalloc(&st, sizeof *st));
    printf("bench_cuda_sync: %s, %d SMs, %d dependent steps a sample, %d threads a block; us a step "
           "(median of %d samples)\n\n",
           prop.name, sms, steps, kThreads, kSamples);
    printf(
        "| blocks | graph | graph+PDL | barrier (one kernel) | flag (one kernel) |\n|---|---|---|---|---|\n");
    for (int per_sm = 1; per_sm <= 2; per_sm++) {
        const int blocks = per_sm * sms;
        cudaGraphExec_t plain = chain_graph(step_kernel<false, false>, blocks, false, steps, s, st);
        cudaGraphExec_t pdl = chain_graph(step_kernel<true, false>, blocks, true, steps, s, st);
        const float t_plain =
            time_steps([&] { TS_CUDA_CHECK(cudaGraphLaunch(plain, s)); }, steps, s, st, "graph");
        const float t_pdl =
            time_steps([&] { TS_CUDA_CHECK(cudaGraphLaunch(pdl, s)); }, steps, s, st, "graph+PDL");
        int n = steps;
        const float t_bar =
            time_steps([&] { launch(persistent_kernel<false>, blocks, false, true, s, st, n); }, steps, s, st,
                       "barrier");
        const float t_flag = time_steps(
            [&] { launch(persistent_kernel<true>, blocks, false, true, s, st, n); }, steps, s, st, "flag");
        printf("| %d (%d an SM) | %.2f | %.2f | %.2f | %.2f |\n", blocks, per_sm, t_plain, t_pdl, t_bar,
               t_flag);
        TS_CUDA_CHECK(cudaGraphExecDestroy(plain));
        TS_CUDA_CHECK(cudaGraphExecDestroy(pdl));
    }
    // the release delay of graph+PDL at one block an SM
    cudaGraphExec_t stamped = chain_graph(step_kernel<true, true>, sms, true, steps, s, st);
    time_steps([&] { TS_CUDA_CHECK(cudaGraphLaunch(stamped, s)); }, steps, s, st, "graph+PDL, stamped");
    sync_state h;
    TS_CUDA_CHECK(cudaMemcpy(&h, st, sizeof h, cudaMemcpyDeviceToHost));
    printf("\ngraph+PDL, %d blocks: from the last block's end to the next kernel's wait returning: %.2f us "
           "(mean of %u boundaries of the last sample)\n",
           sms, h.n_delay ? 1e-3 * (double)h.delay_sum / h.n_delay : 0.0, h.n_delay);
    TS_CUDA_CHECK(cudaGraphExecDestroy(stamped));
    TS_CUDA_CHECK(cudaFree(st));
    TS_CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
}
