/* The turbospark command-line front end: one function per subcommand. */
#ifndef TS_CLI_H
#define TS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int ts_cmd_inspect(int argc, char **argv);
int ts_cmd_devices(int argc, char **argv);
int ts_cmd_synth(int argc, char **argv);
int ts_cmd_convert(int argc, char **argv);
int ts_cmd_quantize(int argc, char **argv);
int ts_cmd_imatrix(int argc, char **argv);
int ts_cmd_logits(int argc, char **argv);
int ts_cmd_generate(int argc, char **argv);
int ts_cmd_bench(int argc, char **argv);
int ts_cmd_plan(int argc, char **argv);
int ts_cmd_perplexity(int argc, char **argv);
int ts_cmd_run(int argc, char **argv);
int ts_cmd_chat(int argc, char **argv);
int ts_cmd_tokenize(int argc, char **argv);
int ts_cmd_serve(int argc, char **argv);

#include "turbospark.h"

/* The ids of a text file ("-": standard input) under tokenizer t (tokenize.c); *ids is malloc'd (the
 * caller frees it). 0 or -1 + err. */
int ts_cli_tokenize_file(const ts_tokenizer *t, const char *text_path, bool parse_special, int32_t **ids,
                         int64_t *n, char *err, size_t errlen);
/* The ids of text[0..len) (tokenize.c); *ids is malloc'd (the caller frees it). 0 or -1 + err. */
int ts_cli_encode(const ts_tokenizer *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                  int64_t *n, char *err, size_t errlen);

/* --backend NAME of the commands that run the model (backend.c): "cpu" or "cuda"; -1 with a
 * message on stderr for an unknown name or cuda in a build without it. */
int ts_cli_backend(const char *name, ts_backend *out);
/* A GPU memory size: GiB as a decimal number, optionally followed by "GiB", or "GB" for 10^9 bytes
 * (1 MiB to 64 TiB); 0 or −1 (not a size). */
int ts_cli_gpu_mem(const char *s, size_t *out);
#define TS_CLI_BACKEND_HELP                                                                                  \
    "  --backend cpu|cuda  where the forward runs (cuda: the first GPU; weights are uploaded once)\n"

#endif
