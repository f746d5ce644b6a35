/* Encoding: specials split off, NFC, pre-tokenizer, byte-level BPE (Hugging Face's merge order).
 *
 * BPE follows tokenizers' Word::merge_all exactly: the symbols start as the bytes of a piece; a
 * min-heap holds candidate merges keyed by (rank, position of the left symbol); a popped entry is
 * applied only if the left symbol is still alive, has a right neighbour, and the merge table maps
 * the current pair to the same merged id (else it is stale and dropped); after a merge, the pairs
 * with the new neighbours are pushed. O(n log n) in the piece length. */
#include "tokenizer/internal.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct heap_item {
    int32_t rank, pos, id;
} heap_item;

typedef struct bpe_work {
    int32_t *id, *prev, *next;
    uint8_t *alive;
    heap_item *heap;
    size_t n_heap, cap; /* cap: symbols the arrays hold */
} bpe_work;

static void work_free(bpe_work *w) {
    free(w->id), free(w->prev), free(w->next), free(w->alive), free(w->heap);
    *w = (bpe_work){0};
}

static int work_reserve(bpe_work *w, size_t n) {
    if (n <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    work_free(w);
    w->id = malloc(cap * sizeof(int32_t));
    w->prev = malloc(cap * sizeof(int32_t));
    w->next = malloc(cap * sizeof(int32_t));
    w->alive = malloc(cap);
    w->heap = malloc(2 * cap * sizeof(heap_item)); /* each merge pushes at most two entries */
    w->cap = cap;
    if (!w->id || !w->prev || !w->next || !w->alive || !w->heap) {
        work_free(w);
        return -1;
    }
    return 0;
}

static bool heap_less(heap_item a, heap_item b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(bpe_work *w, heap_item x) {
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(x, w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = x;
}

static heap_item heap_pop(bpe_work *w) {
    heap_item top = w->heap[0], x = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(w->heap[c + 1], w->heap[c])) c++;
        if (!heap_less(w->heap[c], x)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = x;
    return top;
}

static const ts_merge_entry *merge_find(const ts_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (uint64_t i = (h >> 20) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merges[i].key == key) return &t->merges[i];
        if (t->merges[i].key == 0) return NULL;
    }
}

static void push_pair(const ts_tokenizer *t, bpe_work *w, int32_t pos) {
    int32_t nx = w->next[pos];
    if (nx < 0) return;
    const ts_merge_entry *m = merge_find(t, w->id[pos], w->id[nx]);
    if (m) heap_push(w, (heap_item){m->rank, pos, m->id});
}

static int bpe_piece(const ts_tokenizer *t, const unsigned char *s, size_t n, bpe_work *w, ts_tokens *out) {
    if (work_reserve(w, n)) return -1;
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id < 0) continue; /* like HF without an unknown token: a byte outside the vocabulary is dropped */
        w->id[m] = id, w->prev[m] = m - 1, w->next[m] = m + 1, w->alive[m] = 1;
        m++;
    }
    if (m == 0) return 0;
    w->next[m - 1] = -1;
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < m; i++) push_pair(t, w, i);
    while (w->n_heap) {
        heap_item top = heap_pop(w);
        int32_t p = top.pos;
        if (!w->alive[p] || w->next[p] < 0) continue;
        int32_t r = w->next[p];
        const ts_merge_entry *cur = merge_find(t, w->id[p], w->id[r]);
        if (!cur || cur->id != top.id) continue; /* stale */
        w->id[p] = top.id;
        w->alive[r] = 0;
        w->next[p] = w->next[r];
        if (w->next[r] >= 0) w->prev[w->next[r]] = p;
        if (w->prev[p] >= 0) push_pair(t, w, w->prev[p]);
        push_pair(t, w, p);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        if (ts_tokens_push(out, w->id[i])) return -1;
    return 0;
}

typedef struct seg_ctx {
    const ts_tokenizer *t;
    const char *s;
    bpe_work *w;
    ts_tokens *out;
    int failed;
} seg_ctx;

static void on_piece(void *ctx, size_t start, size_t len) {
    seg_ctx *c = ctx;
    if (!c->failed && bpe_piece(c->t, (const unsigned char *)c->s + start, len, c->w, c->out)) c->failed = 1;
}

/* One run of text between added tokens: NFC, pre-tokenize, BPE each piece. */
static int encode_segment(const ts_tokenizer *t, const char *s, size_t n, bpe_work *w, ts_tokens *out,
                          char *err, size_t errlen) {
    if (n == 0) return 0;
    ts_text nfc = {0};
    if (ts_utf8_nfc(s, n, &nfc, err, errlen)) return -1;
    seg_ctx c = {t, nfc.s, w, out, 0};
    int rc = nfc.n ? ts_pretok_split(t->pretok, nfc.s, nfc.n, on_piece, &c, err, errlen) : 0;
    if (!rc && c.failed) rc = ts_errf(err, errlen, "out of memory while tokenizing");
    ts_text_free(&nfc);
    return rc;
}

int ts_tokenize(const ts_tokenizer *t, const char *text, size_t len, bool parse_special, ts_tokens *out,
                char *err, size_t errlen) {
    ts_text clean = {0};
    if (ts_utf8_sanitize(text ? text : "", text ? len : 0, &clean) < 0)
        return ts_errf(err, errlen, "out of memory while tokenizing");
    const char *s = clean.s ? clean.s : "";
    size_t n = clean.n;
    bpe_work w = {0};
    int rc = 0;
    size_t seg = 0;
    for (size_t i = 0; i < n && !rc;) {
        unsigned char b = (unsigned char)s[i];
        int32_t hit = -1;
        size_t hit_len = 0;
        for (uint32_t k = t->special_start[b]; k < t->special_start[b + 1]; k++) {
            int32_t id = t->special_ids[k];
            if (!parse_special && t->type[id] != TS_TOKEN_USER_DEFINED) continue;
            size_t l = (size_t)(t->text_off[id + 1] - t->text_off[id]);
            if (l <= n - i && !memcmp(s + i, t->text_arena + t->text_off[id], l)) {
                hit = id, hit_len = l; /* longest first: the first hit is the leftmost-longest */
                break;
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        rc = encode_segment(t, s + seg, i - seg, &w, out, err, errlen);
        if (!rc && ts_tokens_push(out, hit)) rc = ts_errf(err, errlen, "out of memory while tokenizing");
        i += hit_len;
        seg = i;
    }
    if (!rc) rc = encode_segment(t, s + seg, n - seg, &w, out, err, errlen);
    work_free(&w);
    ts_text_free(&clean);
    return rc;
}
