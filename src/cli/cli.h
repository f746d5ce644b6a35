/* The turbospark command-line front end: one function per subcommand. */
#ifndef TS_CLI_H
#define TS_CLI_H

int ts_cmd_inspect(int argc, char **argv);
int ts_cmd_devices(int argc, char **argv);
int ts_cmd_synth(int argc, char **argv);
int ts_cmd_convert(int argc, char **argv);
int ts_cmd_quantize(int argc, char **argv);
int ts_cmd_logits(int argc, char **argv);
int ts_cmd_generate(int argc, char **argv);
int ts_cmd_bench(int argc, char **argv);
int ts_cmd_perplexity(int argc, char **argv);

#endif
