/* Internals shared by the tokenizer's files (not part of its interface). */
#ifndef TS_TOKENIZER_INTERNAL_H
#define TS_TOKENIZER_INTERNAL_H

#include "tokenizer/tokenizer.h"

#include <stdint.h>

/* Open-addressing hash of byte strings -> id (linear probing; capacity a power of two). */
typedef struct ts_strmap {
    int32_t *slot; /* -1 empty, else a token id */
    uint32_t *hash;
    uint64_t mask;
} ts_strmap;

/* (left id, right id) -> (rank, merged id). */
typedef struct ts_merge_entry {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
    int32_t rank;
    int32_t id;
} ts_merge_entry;

typedef struct ts_pretok ts_pretok; /* compiled pre-tokenizer regex (pretok.c) */

struct ts_tokenizer {
    int32_t n;              /* tokens */
    char *text_arena;       /* the file's token texts, back to back */
    uint64_t *text_off;     /* [n + 1] */
    char *bytes_arena;      /* decoded bytes of every token (NORMAL: GPT-2 byte map undone) */
    uint64_t *bytes_off;    /* [n + 1] */
    uint8_t *type;          /* [n] TS_TOKEN_* */
    uint8_t *eog;           /* [n] end-of-generation flag */
    ts_strmap by_text;      /* file text -> id (a NORMAL token wins over another type) */
    ts_merge_entry *merges; /* [merge_mask + 1] */
    uint64_t merge_mask;
    int64_t n_merges;
    int32_t byte_id[256]; /* token of each single byte, -1 if the vocabulary lacks it */
    /* Added tokens (CONTROL, UNKNOWN, USER_DEFINED) by first byte, longest first, for atomic
     * leftmost-longest matching: special_ids[special_start[b] .. special_start[b + 1]). */
    int32_t *special_ids;
    uint32_t special_start[257];
    char pre[32];
    ts_pretok *pretok;
    char *chat_template;
    int32_t bos, eos, pad, eot, eom;
    bool add_bos;
};

/* GPT-2 byte <-> code point map (bytes_to_unicode). */
uint32_t ts_byte_to_cp(uint8_t b);
int ts_cp_to_byte(uint32_t cp);             /* -1 when cp is not in the map */
size_t ts_utf8_put(uint32_t cp, char *out); /* 1..4 bytes */
/* Length of the valid UTF-8 character at s[0..n) (> 0, *cp set), or the negated length of its
 * maximal invalid subpart (< 0), or 0 when s holds a valid but incomplete prefix (n too short). */
int ts_utf8_char(const unsigned char *s, size_t n, uint32_t *cp);

/* Pre-tokenizer regex (pretok.c). */
int ts_pretok_new(const char *pre, ts_pretok **out, char *err, size_t errlen);
void ts_pretok_free(ts_pretok *p);
int ts_pretok_split(const ts_pretok *p, const char *s, size_t n,
                    void (*piece)(void *ctx, size_t start, size_t len), void *ctx, char *err, size_t errlen);

/* The HF regex of a known pre-tokenizer name, or NULL. */
const char *ts_pretok_pattern(const char *pre);

uint32_t ts_hash_bytes(const void *p, size_t n);

#endif
