/* The forward's discrete choices, for diagnostics (forward.h: ts_cpu_set_choice_hook,
 * TURBOSPARK_CPU_CHOICES). */
#include "cpu/layers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static ts_cpu_choice_fn g_fn;
static void *g_ctx;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *g_path; /* TURBOSPARK_CPU_CHOICES */
static FILE *g_file;       /* opened at the first choice */
static bool g_failed;      /* it could not be opened or written (said once on stderr) */

void ts_cpu_set_choice_hook(ts_cpu_choice_fn fn, void *ctx) {
    g_fn = fn, g_ctx = ctx;
}

static void read_env(void) {
    const char *p = getenv("TURBOSPARK_CPU_CHOICES");
    g_path = p && *p ? p : NULL;
}

bool ts_cpu_choices_on(void) {
    pthread_once(&g_once, read_env);
    return g_fn || g_path;
}

static void close_file(void) {
    if (g_file && fclose(g_file) != 0 && !g_failed)
        fprintf(stderr, "turbospark: TURBOSPARK_CPU_CHOICES: cannot finish writing %s\n", g_path);
    g_file = NULL;
}

void ts_cpu_choice(int kind, int layer, int seq, int64_t pos, float margin, int64_t n, const int64_t *ids) {
    if (g_fn) {
        g_fn(g_ctx, kind, layer, seq, pos, margin, n, ids);
        return;
    }
    if (!g_path) return;
    pthread_mutex_lock(&g_mu);
    if (!g_file && !g_failed) {
        if ((g_file = fopen(g_path, "wb")) != NULL) {
            atexit(close_file);
        } else {
            g_failed = true;
            fprintf(stderr, "turbospark: TURBOSPARK_CPU_CHOICES: cannot create %s; choices not recorded\n",
                    g_path);
        }
    }
    if (g_file) {
        const int32_t head[4] = {kind, layer, seq, (int32_t)pos}, cnt = (int32_t)n;
        bool ok = fwrite(head, sizeof head, 1, g_file) == 1 &&
                  fwrite(&margin, sizeof margin, 1, g_file) == 1 && fwrite(&cnt, sizeof cnt, 1, g_file) == 1;
        for (int64_t i = 0; ok && i < n; i++) {
            const int32_t id = (int32_t)ids[i];
            ok = fwrite(&id, sizeof id, 1, g_file) == 1;
        }
        if (!ok && !g_failed) {
            g_failed = true;
            fprintf(stderr, "turbospark: TURBOSPARK_CPU_CHOICES: cannot write %s; the record is incomplete\n",
                    g_path);
        }
    }
    pthread_mutex_unlock(&g_mu);
}

void ts_cpu_row_position(const ts_cpu_work *w, int64_t r, int *seq, int64_t *pos) {
    const ts_cpu_batch *b = w->batch;
    *seq = -1, *pos = r; /* a block run outside a forward (tests): the row */
    if (!b) return;
    for (int s = 0; s < b->n_seq; r -= b->T[s++])
        if (r < b->T[s]) {
            *seq = s, *pos = b->st[s]->pos + r;
            return;
        }
}
