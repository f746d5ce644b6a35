/* The bookkeeping of the persistent product chain (persist.cu), in C so that the host test
 * (tests/unit/test_persist_sched.c) runs the very functions the kernel runs.
 *
 * Tiles. The chain's products are cut into tiles of output rows (8, or 16); tile g of the whole chain (product
 * order, then row order) belongs to thread block g mod grid, and a block takes its tiles in order.
 * Product p waits for every tile of the product it reads (dep < p) and no other, so the chain cannot
 * deadlock while all blocks are resident: the lowest unfinished product's input is complete, and each
 * block's tiles before it belong to finished products.
 *
 * Weight ring. Each block streams its tiles' weights into a ring of shared memory in the order it
 * consumes them, regardless of product boundaries, so the copies of the next products' weights run while
 * the block waits for an input: a FIFO of byte ranges (one a tile, 128-byte aligned, of different sizes),
 * at most TS_RING_MAX in flight. One thread places and pushes; the block releases the oldest tile when
 * every warp is done with it. */
#ifndef TS_CUDA_PERSIST_SCHED_H
#define TS_CUDA_PERSIST_SCHED_H

#include <stdint.h>

#ifdef __CUDACC__
#define TS_PS_HD __host__ __device__ __forceinline__
#else
#define TS_PS_HD static inline
#endif

#define TS_RING_MAX 16 /* tiles in flight a block (one mbarrier each) */

typedef struct ts_ring {
    uint32_t size;             /* bytes */
    uint32_t head;             /* where the next tile may start */
    uint32_t issued, released; /* tiles pushed and released so far (issued − released ≤ TS_RING_MAX) */
    uint32_t off[TS_RING_MAX]; /* start of tile n at off[n % TS_RING_MAX] while it is in flight */
} ts_ring;

TS_PS_HD void ts_ring_init(ts_ring *r, uint32_t size) {
    r->size = size, r->head = 0, r->issued = 0, r->released = 0;
}

/* Where a tile of `bytes` (≤ size) can start now, or −1 when it must wait for a release. The live tiles
 * occupy [off of the oldest, head) going around; a tile never wraps (it starts at 0 instead, leaving the
 * end of the ring unused for that lap). */
TS_PS_HD int64_t ts_ring_place(const ts_ring *r, uint32_t bytes) {
    const uint32_t live = r->issued - r->released;
    if (live == 0) return 0;
    if (live >= TS_RING_MAX) return -1;
    const uint32_t tail = r->off[r->released % TS_RING_MAX];
    if (r->head > tail) { /* free: [head, size) and [0, tail) */
        if (bytes <= r->size - r->head) return r->head;
        return bytes <= tail ? 0 : -1;
    }
    if (r->head < tail) return bytes <= tail - r->head ? (int64_t)r->head : -1; /* free: [head, tail) */
    return -1; /* head == tail with tiles live: full */
}

/* The next tile goes at off (from ts_ring_place). */
TS_PS_HD void ts_ring_push(ts_ring *r, uint32_t off, uint32_t bytes) {
    r->off[r->issued % TS_RING_MAX] = off;
    r->issued++;
    r->head = off + bytes;
}

/* Start of tile n (issued, not released). */
TS_PS_HD uint32_t ts_ring_at(const ts_ring *r, uint32_t n) {
    return r->off[n % TS_RING_MAX];
}

/* The oldest tile is done. */
TS_PS_HD void ts_ring_release(ts_ring *r) {
    r->released++;
}

/* A block's walk over its tiles: tile g = block + j·grid; prod_tile0[p] is product p's first tile
 * (prod_tile0[n] = every tile), and the cursor moves forward only (j increases). */
typedef struct ts_tile_cursor {
    int p;    /* product of the current tile */
    int tile; /* its index within the product */
} ts_tile_cursor;

TS_PS_HD void ts_tile_seek(const int *prod_tile0, int n, int g, ts_tile_cursor *c) {
    while (c->p + 1 < n && g >= prod_tile0[c->p + 1]) c->p++;
    c->tile = g - prod_tile0[c->p];
}

/* Whether tile g (of product p) is the last of p that its block takes: the block's next tile, g + grid, is
 * past p. The block then counts its tiles of p at once (one count a block and product). */
TS_PS_HD int ts_tile_last_of_product(const int *prod_tile0, int p, int g, int grid) {
    return g + grid >= prod_tile0[p + 1];
}

/* Tiles of block b of `grid`: ⌈(total − b) / grid⌉. */
TS_PS_HD int ts_tiles_of_block(int total, int b, int grid) {
    return total > b ? (total - b + grid - 1) / grid : 0;
}

#endif
