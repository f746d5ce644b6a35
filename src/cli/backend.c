/* The --backend option shared by run, chat, logits, generate, perplexity, bench and serve. */
#include "cli/cli.h"

#include <stdio.h>
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
