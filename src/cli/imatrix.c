/* turbospark imatrix: importance matrices for quantization, as llama.cpp's llama-imatrix
 * (src/convert/imatrix.h has the method and the file formats). */
#include "cli/cli.h"

#include "cli/args.h"
#include "cli/npy.h"
#include "convert/imatrix.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_IN_FILES = 64 };

static void imatrix_usage(FILE *f) {
    fprintf(
        f, "usage: turbospark imatrix -m MODEL.gguf (-f TEXT | --tokens-npy IDS.npy) [-o imatrix.gguf] [-c "
           "512]\n"
           "                          [--chunks N]"
           " [--output-format gguf|dat] [--in-file A.gguf --in-file B.dat ...]\n"
           "\n"
           "Runs TEXT through the model on the CPU in chunks of -c tokens (each from an empty state) and\n"
           "writes, for every weight matrix of every block, the sum of the squared activations entering\n"
           "each of its input columns and the number of tokens (per expert for the routed experts, over the\n"
           "tokens routed to it): llama.cpp's importance matrix, for `quantize --imatrix`.\n"
           "  -f TEXT                a text file, tokenized with the model's tokenizer (no BOS, special\n"
           "                         tokens not parsed); --tokens-npy: its ids as an int32 1-D .npy instead\n"
           "  -o FILE                output (default imatrix.gguf)\n"
           "  -c N                   tokens a chunk (default 512)\n"
           "  --chunks N             at most N chunks (default: as many as the text fills)\n"
           "  --output-format F      gguf (current llama.cpp, default) or dat (the older format)\n"
           "  --in-file FILE         add an existing imatrix (.gguf or .dat); with no -f, the files are\n"
           "                         only combined. A .dat file's chunk size is taken to be -c.\n");
}

int ts_cmd_imatrix(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *tokens = NULL, *out = "imatrix.gguf", *in_files[MAX_IN_FILES];
    int n_in = 0;
    long n_ctx = 512, chunks = 0;
    bool dat = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            imatrix_usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "turbospark imatrix: unknown or incomplete argument '%s'\n", a);
            imatrix_usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            text = v;
        } else if (!strcmp(a, "--tokens-npy")) {
            tokens = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output-file")) {
            out = v;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (ts_cli_long(v, 1, INT_MAX, &n_ctx)) {
                fprintf(stderr, "turbospark imatrix: '-c %s' is not a token count\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--chunks")) {
            if (ts_cli_long(v, 1, INT_MAX, &chunks)) {
                fprintf(stderr, "turbospark imatrix: '--chunks %s' is not a positive count\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--output-format")) {
            if (strcmp(v, "gguf") && strcmp(v, "dat")) {
                fprintf(stderr, "turbospark imatrix: --output-format is gguf or dat (got '%s')\n", v);
                return 2;
            }
            dat = !strcmp(v, "dat");
        } else if (!strcmp(a, "--in-file")) {
            if (n_in == MAX_IN_FILES) {
                fprintf(stderr, "turbospark imatrix: at most %d --in-file\n", MAX_IN_FILES);
                return 2;
            }
            in_files[n_in++] = v;
        } else {
            fprintf(stderr, "turbospark imatrix: unknown argument '%s'\n", a);
            imatrix_usage(stderr);
            return 2;
        }
    }
    if (text && tokens) {
        fprintf(stderr, "turbospark imatrix: -f and --tokens-npy exclude each other\n");
        return 2;
    }
    const char *source = text ? text : tokens;
    if (!source && !n_in) {
        fprintf(stderr, "turbospark imatrix: need -m MODEL -f TEXT, or --in-file files to combine\n");
        imatrix_usage(stderr);
        return 2;
    }
    if (source && !model) {
        fprintf(stderr, "turbospark imatrix: %s needs the model (-m)\n", text ? "-f" : "--tokens-npy");
        return 2;
    }
    char err[2048];
    ts_imatrix im = {0};
    int rc = 0;
    for (int i = 0; !rc && i < n_in; i++) rc = ts_imatrix_read(&im, in_files[i], n_ctx, err, sizeof err);
    if (!rc && source) {
        int32_t *ids = NULL;
        int64_t n = 0, shape[TS_NPY_MAX_DIMS];
        int n_dims = 1;
        ts_model *m = NULL;
        const ts_tokenizer *tok = NULL;
        rc = ts_model_load(model, &m, err, sizeof err);
        if (!rc)
            rc = text ? ts_model_tokenizer(m, &tok, err, sizeof err) ||
                            ts_cli_tokenize_file(tok, text, false, &ids, &n, err, sizeof err)
                      : ts_npy_read(tokens, 'i', (void **)&ids, &n_dims, shape, err, sizeof err);
        if (!rc && tokens) {
            n = shape[0];
            if (n_dims != 1)
                rc = -1, snprintf(err, sizeof err, "%s: the token ids must be a 1-D array", tokens);
        }
        if (!rc) {
            fprintf(stderr, "imatrix: %" PRId64 " tokens, chunks of %ld\n", n, n_ctx);
            rc = ts_imatrix_collect(&im, m, ids, n, n_ctx, chunks, source, true, err, sizeof err);
        }
        ts_model_free(m);
        free(ids);
    }
    if (!rc)
        rc = dat ? ts_imatrix_write_dat(&im, out, err, sizeof err)
                 : ts_imatrix_write_gguf(&im, out, err, sizeof err);
    if (rc) {
        fprintf(stderr, "turbospark imatrix: %s\n", err);
    } else {
        fprintf(stderr, "wrote %s: %zu entries, %" PRId64 " chunks of %" PRId64 " tokens\n", out, im.n,
                im.chunk_count, im.chunk_size);
    }
    ts_imatrix_free(&im);
    return rc ? 1 : 0;
}
