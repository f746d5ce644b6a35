/* The GGUF reader's fuzz harness body (fuzz_gguf.c), shared by the libFuzzer target and the plain
 * replay test (replay.c). */
#ifndef TS_FUZZ_GGUF_H
#define TS_FUZZ_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input through the reader and checks its promises (aborts when one is broken).
 * Returns 0 when the reader accepted the input, 1 when it refused it. */
int ts_fuzz_gguf_one(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
