/* Every kernel a CUDA program runs, with its GPU start and end, graph-launched kernels included: a CUPTI
 * injection library. Nsight Systems cannot write its reports on the GPU machine; this gives the same
 * timeline for a decode step replayed as a CUDA graph, where Nsight Compute only times each kernel alone.
 *
 *   CUDA_INJECTION64_PATH=/path/libts_kernel_trace.so TS_TRACE_OUT=trace.csv turbospark bench ...
 *   python3 tools/timeline_table.py trace.csv
 *
 * The CUDA driver loads the library at its initialisation and calls InitializeInjection, which asks CUPTI
 * for concurrent-kernel activity records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: kernels keep running
 * side by side, and a programmatic dependent launch keeps its early start). At exit the records still
 * buffered are flushed and TS_TRACE_OUT (default ts_trace.csv) holds one line a kernel execution:
 *
 *   start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,dyn_smem,registers,name
 *
 * start and end are CUPTI's GPU timestamps in ns; graph_id 0 for a kernel not launched by a graph;
 * correlation_id names the API call behind it (every kernel of one cudaGraphLaunch shares it); grid and
 * block as XxYxZ; name as the compiler mangled it. Records CUPTI dropped (its buffers full) are counted on
 * stderr at exit. Not part of turbospark: built beside the CUDA tests when the toolkit has CUPTI. */
#include <cupti.h>

/* CUDA 13's CUPTI returns a kernel as CUpti_ActivityKernel10; older toolkits have another record */
#if CUPTI_API_VERSION < 130000
#error "ts_kernel_trace reads CUPTI 13's kernel records (CUDA 13.0 or later)"
#endif

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kBufferBytes = 8 << 20 };

static FILE *g_out;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static size_t g_records, g_dropped;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, kBufferBytes);
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0; /* as many as fit */
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&g_mu);
    while (g_out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        fprintf(g_out, "%llu,%llu,%u,%llu,%u,%u,%dx%dx%d,%dx%dx%d,%d,%u,%s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->graphId, (unsigned long long)k->graphNodeId, k->correlationId,
                k->streamId, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                k->dynamicSharedMemory, (unsigned)k->registersPerThread, k->name ? k->name : "?");
        g_records++;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    pthread_mutex_unlock(&g_mu);
    free(buffer);
}

static void finish(void) {
    cuptiActivityFlushAll(1);
    pthread_mutex_lock(&g_mu);
    if (g_out) fclose(g_out);
    g_out = NULL;
    fprintf(stderr, "ts_kernel_trace: %zu kernel records written, %zu dropped\n", g_records, g_dropped);
    pthread_mutex_unlock(&g_mu);
}

static int failed(const char *what, CUptiResult r) {
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    fprintf(stderr, "ts_kernel_trace: %s failed: %s; no trace is written\n", what, s ? s : "unknown error");
    return 0;
}

/* Called by the CUDA driver (CUDA_INJECTION64_PATH) once, at its initialisation; 1: initialised. */
int InitializeInjection(void) {
    const char *path = getenv("TS_TRACE_OUT");
    if (!path || !*path) path = "ts_trace.csv";
    g_out = fopen(path, "w");
    if (!g_out) {
        fprintf(stderr, "ts_kernel_trace: cannot write %s; no trace is written\n", path);
        return 0;
    }
    fprintf(g_out, "start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,dyn_smem,"
                   "registers,name\n");
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) {
        fclose(g_out);
        g_out = NULL;
        return failed("asking CUPTI for the kernel records", r);
    }
    atexit(finish);
    return 1;
}
