/* First-fit ranges in a fixed span (see range_alloc.h). */
#include "common/range_alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct range {
    size_t off;  /* first byte */
    size_t size; /* bytes, a multiple of the alignment */
} range;

struct ts_range_alloc {
    size_t size;  /* the span's bytes, a multiple of align */
    size_t align; /* a power of two */
    range *r;     /* [cap] the ranges in use, sorted by offset, the first n valid */
    size_t n, cap;
    size_t used; /* Σ r[i].size */
};

ts_range_alloc *ts_range_alloc_new(size_t size, size_t align) {
    if (align == 0 || (align & (align - 1))) return NULL;
    ts_range_alloc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->size = size & ~(align - 1), a->align = align;
    return a;
}

void ts_range_alloc_free(ts_range_alloc *a) {
    if (!a) return;
    free(a->r);
    free(a);
}

/* bytes rounded up to the alignment (at least one unit), or 0 when that overflows */
static size_t rounded(const ts_range_alloc *a, size_t bytes) {
    if (bytes == 0) return a->align;
    return bytes > SIZE_MAX - (a->align - 1) ? 0 : (bytes + a->align - 1) & ~(a->align - 1);
}

/* The gap before range i (i == n: the gap after the last range). */
static range gap(const ts_range_alloc *a, size_t i) {
    const size_t start = i == 0 ? 0 : a->r[i - 1].off + a->r[i - 1].size;
    const size_t end = i == a->n ? a->size : a->r[i].off;
    return (range){.off = start, .size = end - start};
}

bool ts_range_fits(const ts_range_alloc *a, size_t bytes) {
    const size_t want = rounded(a, bytes);
    if (want == 0) return false;
    for (size_t i = 0; i <= a->n; i++)
        if (gap(a, i).size >= want) return true;
    return false;
}

bool ts_range_take(ts_range_alloc *a, size_t bytes, size_t *off) {
    const size_t want = rounded(a, bytes);
    if (want == 0) return false;
    for (size_t i = 0; i <= a->n; i++) {
        const range g = gap(a, i);
        if (g.size < want) continue;
        if (a->n == a->cap) {
            const size_t cap = a->cap ? 2 * a->cap : 16;
            range *r = realloc(a->r, cap * sizeof *r);
            if (!r) return false;
            a->r = r, a->cap = cap;
        }
        memmove(a->r + i + 1, a->r + i, (a->n - i) * sizeof *a->r);
        a->r[i] = (range){.off = g.off, .size = want};
        a->n++;
        a->used += want;
        *off = g.off;
        return true;
    }
    return false;
}

bool ts_range_give(ts_range_alloc *a, size_t off) {
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (a->r[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == a->n || a->r[lo].off != off) return false;
    a->used -= a->r[lo].size;
    memmove(a->r + lo, a->r + lo + 1, (a->n - lo - 1) * sizeof *a->r);
    a->n--;
    return true;
}

size_t ts_range_used(const ts_range_alloc *a) {
    return a->used;
}
size_t ts_range_count(const ts_range_alloc *a) {
    return a->n;
}
size_t ts_range_size(const ts_range_alloc *a) {
    return a->size;
}
