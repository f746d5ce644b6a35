/* turbospark devices: the compute devices this build can use. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#ifdef TS_HAVE_CUDA
#include "cuda/cuda_device.h"
#endif

int ts_cmd_devices(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: turbospark devices\n\nLists the backends of this build and the CUDA devices it can "
               "see.\n");
        return 0;
    }
    printf("cpu: available\n");
#ifdef TS_HAVE_CUDA
    char err[256];
    if (ts_cuda_list_devices(stdout, err, sizeof err)) printf("cuda: built in, but %s\n", err);
#else
    printf("cuda: not built (nvcc was not found at build time)\n");
#endif
    return 0;
}
