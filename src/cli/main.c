/* turbospark: subcommand dispatch. */
#include "cli/cli.h"

#include "turbospark.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command k_commands[] = {
    {"run", ts_cmd_run, "complete a text prompt, streaming the continuation"},
    {"chat", ts_cmd_chat, "an interactive conversation with the model's chat template"},
    {"serve", ts_cmd_serve, "an OpenAI-compatible HTTP server with continuous batching"},
    {"inspect", ts_cmd_inspect, "show a GGUF file's metadata, tensors and types; dump a tensor as .npy"},
    {"logits", ts_cmd_logits, "run a token prompt (.npy) and write the logits of every position (.npy)"},
    {"generate", ts_cmd_generate, "greedy continuation of a token prompt (.npy in, .npy out)"},
    {"tokenize", ts_cmd_tokenize, "text to token ids with a model's tokenizer (or a Hugging Face folder's)"},
    {"perplexity", ts_cmd_perplexity, "perplexity of a token file in llama.cpp's convention"},
    {"bench", ts_cmd_bench, "prompt and generation tokens/s against the memory-bandwidth floor"},
    {"plan", ts_cmd_plan,
     "GPU memory of a model (weights, table, state) and how many sequences of each context fit"},
    {"synth", ts_cmd_synth,
     "write a synthetic qwen4exp GGUF (released or tiny config, random or sparse data)"},
    {"convert", ts_cmd_convert, "convert a transformers qwen4_exp checkpoint to GGUF"},
    {"imatrix", ts_cmd_imatrix,
     "importance matrix of a text for quantization (llama.cpp's method and files)"},
    {"quantize", ts_cmd_quantize, "re-encode a qwen4exp GGUF with a quantization mix (q8_0, q4_k_m, ...)"},
    {"devices", ts_cmd_devices, "list the backends of this build and the CUDA devices it sees"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof *k_commands; i++)
        fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(f, "\n'turbospark COMMAND --help' describes one command; 'turbospark --version' the build.\n");
}

/* turbospark --version: the version, the commit built and the backends compiled in. */
static int version(void) {
    printf("turbospark %s (commit %s)\nbackends: cpu%s\n", ts_version(), ts_build_commit(),
           ts_have_cuda() ? " cuda" : "");
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) return version();
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof *k_commands; i++)
        if (strcmp(argv[1], k_commands[i].name) == 0) return k_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "turbospark: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
