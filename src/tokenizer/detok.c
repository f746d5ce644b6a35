/* Decoding and the streaming detokenizer. */
#include "tokenizer/internal.h"

#include "common/error.h"

#include <string.h>

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

int ts_detokenize(const ts_tokenizer *t, const int32_t *ids, size_t n, bool special, ts_text *out, char *err,
                  size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *b = ts_token_bytes(t, ids[i], special, &len);
        if (!b)
            return ts_errf(err, errlen, "token id %d at position %zu is outside the vocabulary (%d tokens)",
                           (int)ids[i], i, (int)t->n);
        if (ts_text_append(out, b, len)) return ts_errf(err, errlen, "out of memory while decoding");
    }
    return 0;
}

void ts_detok_init(ts_detok *d, const ts_tokenizer *t, bool special) {
    *d = (ts_detok){.t = t, .special = special};
}

/* Emits every complete character of held[] + bytes[], U+FFFD for each maximal invalid subpart,
 * and keeps a valid-but-incomplete tail (at most 3 bytes) for the next call. */
int ts_detok_push_bytes(ts_detok *d, const void *bytes, size_t n, ts_text *out) {
    const unsigned char *src = bytes;
    size_t i = 0;
    /* First finish (or give up on) the held prefix using as many new bytes as it needs. */
    while (d->n_held > 0) {
        unsigned char buf[8];
        size_t take = n - i < (size_t)(4 - d->n_held) ? n - i : (size_t)(4 - d->n_held);
        memcpy(buf, d->held, (size_t)d->n_held);
        memcpy(buf + d->n_held, src + i, take);
        size_t have = (size_t)d->n_held + take;
        uint32_t cp;
        int l = ts_utf8_char(buf, have, &cp);
        if (l == 0) { /* still incomplete: keep everything */
            memcpy(d->held + d->n_held, src + i, take);
            d->n_held += (int)take;
            return 0;
        }
        if (l > 0) {
            if (ts_text_append(out, buf, (size_t)l)) return -1;
            i += (size_t)l - (size_t)d->n_held;
            d->n_held = 0;
        } else {
            /* The maximal subpart -l starts with the held bytes; anything after it is re-examined. */
            if (ts_text_append(out, k_fffd, 3)) return -1;
            size_t bad = (size_t)-l;
            if (bad >= (size_t)d->n_held) {
                i += bad - (size_t)d->n_held;
                d->n_held = 0;
            } else { /* cannot happen for a held prefix, which was valid so far; be safe */
                memmove(d->held, d->held + bad, (size_t)d->n_held - bad);
                d->n_held -= (int)bad;
            }
        }
    }
    size_t run = i;
    while (i < n) {
        if (src[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = ts_utf8_char(src + i, n - i, &cp);
        if (l > 0) {
            i += (size_t)l;
            continue;
        }
        if (ts_text_append(out, src + run, i - run)) return -1;
        if (l == 0) { /* incomplete at the end: hold it */
            d->n_held = (int)(n - i);
            memcpy(d->held, src + i, n - i);
            return 0;
        }
        if (ts_text_append(out, k_fffd, 3)) return -1;
        i += (size_t)-l;
        run = i;
    }
    return ts_text_append(out, src + run, n - run);
}

int ts_detok_push(ts_detok *d, int32_t id, ts_text *out, char *err, size_t errlen) {
    size_t len;
    const char *b = ts_token_bytes(d->t, id, d->special, &len);
    if (!b)
        return ts_errf(err, errlen, "token id %d is outside the vocabulary (%d tokens)", (int)id,
                       (int)d->t->n);
    if (ts_detok_push_bytes(d, b, len, out)) return ts_errf(err, errlen, "out of memory while decoding");
    return 0;
}

int ts_detok_flush(ts_detok *d, ts_text *out) {
    if (d->n_held == 0) return 0;
    d->n_held = 0;
    return ts_text_append(out, k_fffd, 3);
}
