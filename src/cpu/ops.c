/* Generic CPU ops: quantized matrix products, row gathers, RMS norm, RoPE. */
#include "cpu/cpu.h"

#include "cpu/dot.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void ts_cpu_get_row(const ts_gguf_tensor *t, int64_t r, float *out) {
    size_t rb = ts_row_size(t->type, t->ne[0]);
    ts_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, out, t->ne[0], NULL, 0);
}

const float *ts_cpu_f32(const ts_gguf_tensor *t, float *scratch) {
    if (t->type == 0 /* F32 */) return (const float *)t->data; /* GGUF data is ≥ 32-byte aligned */
    int64_t rows = t->nelements / t->ne[0];
    for (int64_t r = 0; r < rows; r++) ts_cpu_get_row(t, r, scratch + r * t->ne[0]);
    return scratch;
}

/* ---- matrix products ---------------------------------------------------------------------------
 *
 * ts_cpu_matmul runs the fused kernel of W's type (src/cpu/dot.c: SIMD where the CPU has it, else
 * scalar) over all T tokens. Large products are split by rows across a small pool of persistent
 * threads (as many as omp_get_max_threads(), so -t / OMP_NUM_THREADS still rule):
 *
 *   - the rows are cut into contiguous chunks of about CHUNK_WORK multiply-adds (10-20 us; at least
 *     CHUNKS_PER_THREAD a thread; whole 4-row groups, so results are independent of threads); the caller and the workers
 *     claim chunks in order from one atomic ticket, so the matrix is streamed once, front to back,
 *     and the threads finish within about one chunk of each other;
 *   - the caller always works too and waits only for chunks a worker has actually claimed. With
 *     OpenMP's fork/join every product waited for every thread to arrive, so on a machine whose
 *     cores are shared with other processes a descheduled worker cost a scheduler time slice per
 *     product (prefill measured 3.8 tokens/s with 2 threads vs 64 with 1). Here a late worker simply
 *     finds no chunk left: the product degrades to the caller's speed, never below it;
 *   - idle workers spin for SPIN_US (longer than the serial gaps between the products of a forward
 *     pass), then sleep on a condition variable; only products of at least POOL_WAKE_MIN
 *     multiply-adds wake them (smaller ones use the workers that are spinning);
 *   - the caller compares each product's wall time with its own chunk rate times all chunks; when
 *     that averages above BACKOFF_RATIO (workers starved of CPU by other processes, which with
 *     fine-grained products costs more than it gives: measured under load, 2 threads decoded at
 *     23 tokens/s and 1 thread at 32) it works alone for BACKOFF_US, then tries the pool again.
 *
 * ts_cpu_matmul_each runs the same chunks, every token of a chunk as its own one-token kernel call
 * (the MoE experts: a token's numbers must not depend on which other tokens chose the expert).
 *
 * A job is published as (generation << 32 | next chunk) in the ticket; its descriptor sits in a
 * ring slot of that generation and is read before a worker's compare-and-swap claims a chunk of that
 * same generation, so a worker that wakes late can never run a chunk of a newer job with an older
 * descriptor. Only one caller uses the pool at a time; a concurrent caller runs on its own thread. */

/* Products below MATMUL_PARALLEL_MIN multiply-adds run on the calling thread; below POOL_WAKE_MIN
 * they are shared only with workers that are awake (spinning): waking a sleeping one costs the
 * caller a futex system call, measured at ~20 us on this VM, about what 2^20 multiply-adds take. */
enum {
    MATMUL_PARALLEL_MIN = 1 << 16,
    POOL_WAKE_MIN = 1 << 21,
    CHUNKS_PER_THREAD = 4,
    CHUNK_WORK = 1 << 18,
    POOL_MAX = 64,
    RING = 64,
    SPIN_US = 2000,
    YIELD_US = 50,
    BACKOFF_US = 50000,
};
/* Products whose wall time averages above this fraction of the caller's estimated time alone
 * switch the pool off for BACKOFF_US (workers starved of CPU by other processes). */
static const double BACKOFF_RATIO = 0.85;

typedef struct {
    _Atomic(ts_dot_kernel) k;
    _Atomic(const uint8_t *) w;
    _Atomic(const float *) x;
    _Atomic(float *) y;
    atomic_bool each;
    atomic_llong rb, n_out, n_in, T, rows_per_chunk, nchunks, nworkers;
} job_slot;

typedef struct { /* a job as read from its slot */
    ts_dot_kernel k;
    const uint8_t *w;
    const float *x;
    float *y;
    bool each; /* every token as its own product (ts_cpu_matmul_each) */
    int64_t rb, n_out, n_in, T, rows_per_chunk, nchunks, nworkers;
} job;

static struct {
    pthread_once_t once;
    int nworkers;
    atomic_ullong ticket; /* generation << 32 | next unclaimed chunk */
    atomic_llong done;    /* chunks finished in the live generation */
    atomic_int sleepers;
    atomic_flag busy; /* a caller owns the pool */
    uint32_t gen;     /* last published generation (owner only) */
    double gain_ema;  /* owner only: moving average of wall time / estimated time alone */
    double backoff_until;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_slot slots[RING];
} g_pool = {.once = PTHREAD_ONCE_INIT,
            .busy = ATOMIC_FLAG_INIT,
            .mu = PTHREAD_MUTEX_INITIALIZER,
            .cv = PTHREAD_COND_INITIALIZER};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static job read_slot(uint32_t gen) {
    job_slot *s = &g_pool.slots[gen % RING];
    const memory_order r = memory_order_relaxed;
    return (job){atomic_load_explicit(&s->k, r),       atomic_load_explicit(&s->w, r),
                 atomic_load_explicit(&s->x, r),       atomic_load_explicit(&s->y, r),
                 atomic_load_explicit(&s->each, r),    atomic_load_explicit(&s->rb, r),
                 atomic_load_explicit(&s->n_out, r),   atomic_load_explicit(&s->n_in, r),
                 atomic_load_explicit(&s->T, r),       atomic_load_explicit(&s->rows_per_chunk, r),
                 atomic_load_explicit(&s->nchunks, r), atomic_load_explicit(&s->nworkers, r)};
}

static void write_slot(uint32_t gen, const job *j) {
    job_slot *s = &g_pool.slots[gen % RING];
    const memory_order r = memory_order_relaxed;
    atomic_store_explicit(&s->k, j->k, r), atomic_store_explicit(&s->w, j->w, r);
    atomic_store_explicit(&s->x, j->x, r), atomic_store_explicit(&s->y, j->y, r);
    atomic_store_explicit(&s->each, j->each, r), atomic_store_explicit(&s->rb, j->rb, r);
    atomic_store_explicit(&s->n_out, j->n_out, r), atomic_store_explicit(&s->n_in, j->n_in, r);
    atomic_store_explicit(&s->T, j->T, r);
    atomic_store_explicit(&s->rows_per_chunk, j->rows_per_chunk, r);
    atomic_store_explicit(&s->nchunks, j->nchunks, r), atomic_store_explicit(&s->nworkers, j->nworkers, r);
}

/* Rows o0 … o1−1 of a job for all its tokens: one kernel call, or one a token (each; the rows stay
 * in cache from one token to the next). */
static void run_rows(const job *j, int64_t o0, int64_t o1) {
    const uint8_t *w = j->w + (size_t)o0 * (size_t)j->rb;
    for (int64_t t = 0; t < (j->each ? j->T : 1); t++)
        j->k(w, (size_t)j->rb, o1 - o0, j->n_in, j->x + t * j->n_in, j->n_in, j->each ? 1 : j->T,
             j->y + t * j->n_out + o0, j->n_out);
}

/* Claim and run chunks of generation gen until none is left (or a newer job replaced it); returns
 * how many this thread ran. */
static int64_t work_on(uint32_t gen, const job *j) {
    unsigned long long cur = atomic_load(&g_pool.ticket);
    int64_t ran = 0;
    for (;;) {
        if ((uint32_t)(cur >> 32) != gen || (int64_t)(uint32_t)cur >= j->nchunks) return ran;
        if (!atomic_compare_exchange_weak(&g_pool.ticket, &cur, cur + 1)) continue; /* cur reloaded */
        const int64_t o0 = (int64_t)(uint32_t)cur * j->rows_per_chunk;
        const int64_t o1 = o0 + j->rows_per_chunk < j->n_out ? o0 + j->rows_per_chunk : j->n_out;
        run_rows(j, o0, o1);
        atomic_fetch_add_explicit(&g_pool.done, 1, memory_order_release);
        ran++;
        cur = atomic_load(&g_pool.ticket);
    }
}

static void *pool_worker(void *arg) {
    const int64_t id = (int64_t)(intptr_t)arg;
    uint32_t seen = (uint32_t)(atomic_load(&g_pool.ticket) >> 32);
    for (;;) {
        unsigned long long t = atomic_load(&g_pool.ticket);
        if ((uint32_t)(t >> 32) == seen) {
            const double t0 = now_us();
            for (int i = 1; (uint32_t)((t = atomic_load(&g_pool.ticket)) >> 32) == seen; i++) {
                cpu_relax();
                if (i % 256 == 0 && now_us() - t0 > SPIN_US) { /* idle: sleep until the next job */
                    pthread_mutex_lock(&g_pool.mu);
                    atomic_fetch_add(&g_pool.sleepers, 1);
                    while ((uint32_t)((t = atomic_load(&g_pool.ticket)) >> 32) == seen)
                        pthread_cond_wait(&g_pool.cv, &g_pool.mu);
                    atomic_fetch_sub(&g_pool.sleepers, 1);
                    pthread_mutex_unlock(&g_pool.mu);
                    break;
                }
            }
        }
        seen = (uint32_t)(t >> 32);
        const job j = read_slot(seen);
        if (id < j.nworkers) work_on(seen, &j);
    }
    return NULL;
}

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
#endif
}

static void pool_start(void) {
    int want = max_threads() - 1;
    if (want > POOL_MAX - 1) want = POOL_MAX - 1;
    for (int i = 0; i < want; i++) {
        pthread_t th;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &a, pool_worker, (void *)(intptr_t)i) == 0) g_pool.nworkers++;
        pthread_attr_destroy(&a);
    }
}

/* Runs a job alone, a chunk of rows at a time. */
static void run_alone(const job *j) {
    for (int64_t o0 = 0; o0 < j->n_out; o0 += j->rows_per_chunk)
        run_rows(j, o0, o0 + j->rows_per_chunk < j->n_out ? o0 + j->rows_per_chunk : j->n_out);
}

static ts_cpu_matmul_hook g_matmul_hook;
static void *g_matmul_hook_ctx;

void ts_cpu_set_matmul_hook(ts_cpu_matmul_hook fn, void *ctx) {
    g_matmul_hook = fn, g_matmul_hook_ctx = ctx;
}

/* ---- TURBOSPARK_CPU_ROUND_X: the CUDA tensor-core products' rounding of x, emulated ---------------
 *
 * When on, every product that may round (ts_cpu_matmul, ts_cpu_matmul_each; not the _unrounded ones)
 * whose weights are Q4_K, Q5_K, Q6_K (groups of 256 inputs), Q8_0 or Q5_0 (128), with rows a whole
 * number of groups, multiplies W by x rounded as the tensor-core GEMV and GEMM round it (ts_round_x_like_tc,
 * src/quant/round_x.c) instead of x: each token's x separately, whatever T. Read once. The rounded x
 * lives in a buffer of the calling thread that grows to the largest T·ne0 seen and is kept (the one
 * allocation while evaluating; the switch is off in normal use). */
bool ts_cpu_round_x_enabled(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *e = getenv("TURBOSPARK_CPU_ROUND_X");
        cached = e && *e && strcmp(e, "0") != 0;
    }
    return cached;
}

/* TURBOSPARK_CPU_ROUND_ATT, or TURBOSPARK_CPU_ROUND_X: the CUDA backend's 16-bit attention operands,
 * emulated (src/cpu/qsa.c). The CUDA backend rounds them whatever its products do, so its twin wants
 * them with either switch. Read once. */
bool ts_cpu_round_att_enabled(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *e = getenv("TURBOSPARK_CPU_ROUND_ATT");
        cached = (e && *e && strcmp(e, "0") != 0) || ts_cpu_round_x_enabled();
    }
    return cached;
}

/* x rounded for W's type into the thread's buffer; x itself when the product is not rounded, NULL
 * when the buffer cannot grow. */
static const float *round_x(const ts_gguf_tensor *W, const float *x, int64_t T) {
    static _Thread_local float *buf;
    static _Thread_local size_t cap;
    const int64_t G = ts_tc_x_group(W->type), n = W->ne[0] * T;
    if (G == 0 || W->ne[0] % G != 0 || n <= 0) return x;
    if ((size_t)n > cap) {
        float *nb = realloc(buf, (size_t)n * sizeof *nb);
        if (!nb) return NULL;
        buf = nb, cap = (size_t)n;
    }
    ts_round_x_like_tc(x, n, G, buf);
    return buf;
}

/* ts_cpu_matmul and ts_cpu_matmul_each (may_round: the CUDA decode path rounds this product's x,
 * emulated with TURBOSPARK_CPU_ROUND_X). */
static void matmul(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T, bool each,
                   bool may_round, float *y) {
    if (g_matmul_hook) g_matmul_hook(g_matmul_hook_ctx, W, row0, x, T);
    if (may_round && ts_cpu_round_x_enabled() && n_out > 0 && T > 0 && !(x = round_x(W, x, T))) {
        for (int64_t i = 0; i < n_out * T; i++) y[i] = NAN; /* out of memory: no silent unrounded result */
        return;
    }
    const int64_t n_in = W->ne[0];
    const size_t rb = ts_row_size(W->type, n_in);
    const uint8_t *base = (const uint8_t *)W->data + (size_t)row0 * rb;
    const ts_dot_kernel k = ts_cpu_dot_kernel(W->type);
    if (!k || n_out <= 0 || T <= 0) { /* a type nothing can read (the loader refuses these) */
        for (int64_t i = 0; i < n_out * T; i++) y[i] = NAN;
        return;
    }
    const double work = (double)n_out * (double)n_in * (double)T;
    int nth = 1;
    if (n_out >= 4 && work >= MATMUL_PARALLEL_MIN) {
        nth = max_threads();
        if (nth > 1) {
            pthread_once(&g_pool.once, pool_start);
            if (nth > g_pool.nworkers + 1) nth = g_pool.nworkers + 1;
        }
    }
    job j = {k, base, x, y, each, (int64_t)rb, n_out, n_in, T, n_out, 1, nth - 1};
    if (each) { /* alone too, chunks of about CHUNK_WORK multiply-adds (whole 4-row groups) */
        const int64_t per = (int64_t)(CHUNK_WORK / ((double)n_in * (double)T));
        j.rows_per_chunk = per < 4 ? 4 : per / 4 * 4;
    }
    if (nth <= 1 || atomic_flag_test_and_set(&g_pool.busy)) { /* small, or the pool is in use */
        run_alone(&j);
        return;
    }
    /* chunks of about CHUNK_WORK multiply-adds, at least CHUNKS_PER_THREAD a thread; whole groups of
     * 4 rows, so that every row falls in the same kernel tile (4, 2 or 1 rows) as in one call over
     * all rows: the result does not depend on the thread count or on timing, bit for bit; and whole
     * 16-row groups (one cache line of each token's outputs: no false sharing of y) unless that
     * leaves fewer than two chunks a thread */
    int64_t per = (n_out + (int64_t)nth * CHUNKS_PER_THREAD - 1) / ((int64_t)nth * CHUNKS_PER_THREAD);
    const int64_t by_work = (int64_t)(CHUNK_WORK / ((double)n_in * (double)T));
    if (by_work < per) per = by_work;
    if (n_out >= 2 * nth * 16) per = (per + 15) / 16 * 16;
    per = per < 4 ? 4 : (per + 3) / 4 * 4;
    j.rows_per_chunk = per;
    j.nchunks = (n_out + per - 1) / per;
    const double t0 = now_us();
    if (t0 < g_pool.backoff_until) { /* the workers have not been getting a core: work alone */
        run_alone(&j);
        atomic_flag_clear(&g_pool.busy);
        return;
    }
    const uint32_t gen = ++g_pool.gen;
    write_slot(gen, &j);
    atomic_store(&g_pool.done, 0);
    atomic_store(&g_pool.ticket, (unsigned long long)gen << 32); /* publish */
    if (work >= POOL_WAKE_MIN && atomic_load(&g_pool.sleepers) > 0) {
        pthread_mutex_lock(&g_pool.mu);
        pthread_cond_broadcast(&g_pool.cv);
        pthread_mutex_unlock(&g_pool.mu);
    }
    const int64_t mine = work_on(gen, &j);
    /* the last chunks are a worker's, running; if that takes long the worker may have been
     * preempted, perhaps by this thread on a shared core: yield instead of spinning */
    const double t1 = now_us();
    for (int i = 1; atomic_load_explicit(&g_pool.done, memory_order_acquire) < j.nchunks; i++) {
        cpu_relax();
        if (i % 64 == 0 && now_us() - t1 > YIELD_US) sched_yield();
    }
    const double t2 = now_us();
    /* did the workers help? wall time over this thread's chunk rate times all chunks */
    const double alone = mine > 0 ? (t1 - t0) / (double)mine * (double)j.nchunks : 2 * (t2 - t0);
    g_pool.gain_ema += ((t2 - t0) / (alone > 0 ? alone : 1) - g_pool.gain_ema) / 8;
    if (g_pool.gain_ema > BACKOFF_RATIO) g_pool.backoff_until = t2 + BACKOFF_US, g_pool.gain_ema = 0.5;
    atomic_flag_clear(&g_pool.busy);
}

void ts_cpu_matmul(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T,
                   float *y) {
    matmul(W, row0, n_out, x, T, false, true, y);
}

void ts_cpu_matmul_each(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T,
                        float *y) {
    matmul(W, row0, n_out, x, T, T > 1, true, y); /* one token: the plain product */
}

void ts_cpu_matmul_unrounded(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x, int64_t T,
                             float *y) {
    matmul(W, row0, n_out, x, T, false, false, y);
}

void ts_cpu_matmul_each_unrounded(const ts_gguf_tensor *W, int64_t row0, int64_t n_out, const float *x,
                                  int64_t T, float *y) {
    matmul(W, row0, n_out, x, T, T > 1, false, y);
}

void ts_cpu_rmsnorm(const float *x, const float *g, int64_t n, int64_t group, float eps, float *y) {
    for (int64_t s = 0; s < n; s += group) {
        float ss = 0;
        for (int64_t i = 0; i < group; i++) ss += x[s + i] * x[s + i];
        float r = 1.0f / sqrtf(ss / (float)group + eps);
        for (int64_t i = 0; i < group; i++) y[s + i] = x[s + i] * r * (g ? g[s + i] : 1.0f);
    }
}

void ts_cpu_rope(float *x, int64_t n_rot, float theta, int64_t pos) {
    const int64_t half = n_rot / 2;
    for (int64_t d = 0; d < half; d++) {
        /* as the reference: inv_freq in fp32, angle = fp32(pos · inv_freq) */
        float inv = 1.0f / powf(theta, (float)(2 * d) / (float)n_rot);
        float ang = (float)pos * inv;
        float c = cosf(ang), s = sinf(ang);
        float a = x[d], b = x[d + half];
        x[d] = a * c - b * s;
        x[d + half] = b * c + a * s;
    }
}
