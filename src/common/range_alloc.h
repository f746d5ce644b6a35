/* First-fit allocation of ranges inside one fixed span of bytes [0, size): the GPU memory the CUDA
 * backend reserves for snapshots (src/cuda/forward.cu) is one cudaMalloc cut into ranges here, so
 * that keeping a snapshot in GPU memory neither synchronises the device (as a cudaMalloc would) nor
 * grows past the reservation.
 *
 * The ranges in use are kept sorted by offset in one array; the free ranges are the gaps between
 * them, so freed neighbours coalesce by themselves. take, give and fits are O(ranges in use):
 * a few hundred snapshots at most, next to copies of megabytes. Offsets and sizes are multiples of
 * the alignment given at creation. One thread at a time (the caller locks). */
#ifndef TS_COMMON_RANGE_ALLOC_H
#define TS_COMMON_RANGE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ts_range_alloc ts_range_alloc;

/* A span of size bytes (rounded down to a multiple of align, a power of two ≥ 1); NULL when out of
 * memory. */
ts_range_alloc *ts_range_alloc_new(size_t size, size_t align);
void ts_range_alloc_free(ts_range_alloc *a);

/* The offset of a free range of bytes (rounded up to the alignment; 0 bytes take one unit) at the
 * lowest offset where one fits, now in use: true; false when no free range is that large (or the
 * table of ranges cannot grow). */
bool ts_range_take(ts_range_alloc *a, size_t bytes, size_t *off);
/* Frees the range in use at off (an offset ts_range_take returned); false when there is none. */
bool ts_range_give(ts_range_alloc *a, size_t off);
/* Whether ts_range_take(a, bytes) would succeed now (the largest free range is large enough). */
bool ts_range_fits(const ts_range_alloc *a, size_t bytes);
size_t ts_range_used(const ts_range_alloc *a);  /* bytes in use, rounded ranges */
size_t ts_range_count(const ts_range_alloc *a); /* ranges in use */
size_t ts_range_size(const ts_range_alloc *a);  /* the span's bytes */

#endif
