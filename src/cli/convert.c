/* turbospark convert (HF checkpoint → GGUF) and turbospark quantize (GGUF → GGUF). */
#include "cli/cli.h"

#include "convert/convert.h"

#include <stdio.h>
#include <string.h>

static void convert_usage(FILE *f) {
    fprintf(f,
            "usage: turbospark convert HF_DIR -o OUT.gguf [--type TYPE] [--mtp] [--quiet]\n"
            "\n"
            "Converts a transformers qwen4_exp checkpoint (config.json + model.safetensors, or shards with\n"
            "model.safetensors.index.json; Qwen4ExpForConditionalGeneration or Qwen4ExpForCausalLM) to a\n"
            "qwen4exp GGUF file with llama.cpp's tensor names and transforms. As llama.cpp's converter,\n"
            "it also writes the folder's tokenizer.json (and tokenizer_config.json) as the file's\n"
            "tokenizer and the sampling of its generation_config.json as general.sampling.*.\n"
            "\n"
            "  --type TYPE  matrix types: %s (default bf16).\n"
            "               Mixes follow llama.cpp (see src/convert/mix.h); vectors stay f32, routers\n"
            "               bf16 where that rounds no value (else f32).\n"
            "  --mtp        also convert the multi-token-prediction block (mtp.*) as the last block\n"
            "  --quiet      no progress on stderr\n",
            ts_mix_names());
}

int ts_cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    ts_convert_opts o = {.mix = ts_mix_from_name("bf16")};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            convert_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") && has_val) {
            out = argv[++i];
        } else if (!strcmp(a, "--type") && has_val) {
            o.mix = ts_mix_from_name(argv[++i]);
            if (!o.mix) {
                fprintf(stderr, "turbospark convert: unknown --type '%s' (one of: %s)\n", argv[i],
                        ts_mix_names());
                return 2;
            }
        } else if (!strcmp(a, "--mtp")) {
            o.mtp = true;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o.quiet = true;
        } else if (a[0] != '-' && !in) {
            in = a;
        } else {
            fprintf(stderr, "turbospark convert: unknown or incomplete argument '%s'\n", a);
            convert_usage(stderr);
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "turbospark convert: need a checkpoint directory and -o OUT.gguf\n");
        convert_usage(stderr);
        return 2;
    }
    char err[2048];
    if (ts_convert_hf(in, out, &o, err, sizeof err)) {
        fprintf(stderr, "turbospark convert: %s\n", err);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s)\n", out, o.mix->name);
    return 0;
}

static void quantize_usage(FILE *f) {
    fprintf(
        f,
        "usage: turbospark quantize IN.gguf OUT.gguf TYPE [--imatrix FILE] [--quiet]\n"
        "\n"
        "Re-encodes every matrix of a qwen4exp GGUF (dequantize, then quantize each row) with the\n"
        "mix TYPE: %s.\n"
        "Vectors and all metadata are kept; a tensor already of its target type is copied as it is.\n"
        "  --imatrix FILE  importance matrix (turbospark imatrix or llama-imatrix, .gguf or .dat): its\n"
        "                  weights steer the fits of the tensors it covers whose type is a K-quant,\n"
        "                  iq4_nl, iq4_xs or a lattice i-quant, as llama-quantize does (bit-identical to\n"
        "                  ggml); iq2_xxs and iq2_xs (mix ud_iq2_xxs) are quantized only with one\n",
        ts_mix_names());
}

int ts_cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0;
    bool quiet = false;
    const char *imatrix = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            quantize_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--imatrix") && i + 1 < argc) {
            imatrix = argv[++i];
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = true;
        } else if (argv[i][0] != '-' && n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            fprintf(stderr, "turbospark quantize: unknown or extra argument '%s'\n", argv[i]);
            quantize_usage(stderr);
            return 2;
        }
    }
    if (n_pos != 3) {
        quantize_usage(stderr);
        return 2;
    }
    const ts_mix *mix = ts_mix_from_name(pos[2]);
    if (!mix) {
        fprintf(stderr, "turbospark quantize: unknown type '%s' (one of: %s)\n", pos[2], ts_mix_names());
        return 2;
    }
    char err[2048];
    if (ts_quantize_gguf(pos[0], pos[1], mix, imatrix, quiet, err, sizeof err)) {
        fprintf(stderr, "turbospark quantize: %s\n", err);
        return 1;
    }
    fprintf(stderr, "wrote %s (%s)\n", pos[1], mix->name);
    return 0;
}
