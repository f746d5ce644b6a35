/* The files of llama-server-style slot persistence (serve --slot-save-path DIR, POST
 * /slots/{id}?action=save|restore): a slot's sequence state with the token ids it holds, so that a
 * restored slot knows which prompts it can continue.
 *
 * The layout, little-endian:
 *   "TSSLOT\0\0"  8 bytes of magic
 *   u32 version   1
 *   u32 zero
 *   u64 n         tokens
 *   u64 sum       FNV-1a 64 over everything after the header
 *   i32 × n       the token ids, in order
 *   the session state as ts_snapshot_encode writes it (its own header names the format version, the
 *   backend, the position — which must equal n — and a fingerprint of the model's tensors).
 *
 * A file is written whole under a temporary name in DIR and renamed, so a reader never sees half of
 * one. Reading refuses, with a sentence, anything else: another format, another model, a state
 * whose position is not its token count, ids outside the vocabulary, a truncated or padded file,
 * something that is not a regular file, and a file larger than any state the server's slots hold. */
#ifndef TS_SERVER_SLOTFILE_H
#define TS_SERVER_SLOTFILE_H

#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes sess's state and ids[0 .. n) (n must be its position) to dir/name, replacing a file of
 * that name; *written: the file's bytes. 0, or −1 with a sentence (−2 when dir/name is something
 * other than a regular file, a directory say). */
int ts_slotfile_save(const char *dir, const char *name, const ts_session *sess, const int32_t *ids, size_t n,
                     uint64_t *written, char *err, size_t errlen);

/* Reads dir/name for model m: the state in *snap (the caller frees it) and the ids in *ids
 * (appended; the caller frees them); *read: the file's bytes. A file past max_bytes is refused
 * unread. 0, or −1 with a sentence and *missing set when there is no such file. */
int ts_slotfile_load(const char *dir, const char *name, const ts_model *m, uint64_t max_bytes,
                     ts_snapshot **snap, ts_tokens *ids, uint64_t *read, bool *missing, char *err,
                     size_t errlen);

#endif
