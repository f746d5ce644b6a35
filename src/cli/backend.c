/* The --backend option shared by run, chat, logits, generate, perplexity, bench and serve, and the
 * GPU memory sizes of plan and bench (--gpu-mem). */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ts_cli_backend(const char *name, ts_backend *out) {
    if (!strcmp(name, "cpu")) {
        *out = TS_BACKEND_CPU;
        return 0;
    }
    if (!strcmp(name, "cuda")) {
        if (!ts_have_cuda()) {
            fprintf(stderr, "backend 'cuda' is not in this build (nvcc was not found when it was built); use "
                            "--backend cpu\n");
            return -1;
        }
        *out = TS_BACKEND_CUDA;
        return 0;
    }
    fprintf(stderr, "unknown backend '%s' (available: cpu%s)\n", name, ts_have_cuda() ? ", cuda" : "");
    return -1;
}

/* GiB as a decimal number, optionally followed by "GiB", or "GB" for 10^9 bytes. */
int ts_cli_gpu_mem(const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0) return -1;
    double scale = 1073741824.0;
    if (!strcmp(end, "GB"))
        scale = 1e9;
    else if (*end && strcmp(end, "GiB"))
        return -1;
    const double bytes = v * scale;
    if (bytes < 1048576.0 || bytes > 1099511627776.0 * 64) return -1; /* 1 MiB to 64 TiB */
    *out = (size_t)bytes;
    return 0;
}
