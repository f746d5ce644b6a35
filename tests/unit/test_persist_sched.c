/* The persistent product chain's bookkeeping (src/cuda/persist_sched.h), the functions its kernel runs:
 *   - the weight ring's edges: an empty ring takes a tile at 0, a full one refuses, a tile that does not
 *     fit before the end starts at 0 once the front is free, at most TS_RING_MAX tiles in flight;
 *   - the ring under random tile sizes and releases, as a block uses it: a byte map of the live tiles
 *     (a placed tile never covers a live one), ts_ring_at returns each tile's start, and an empty ring
 *     always takes the next tile (the block never waits for a tile it has not issued);
 *   - the tiles of random chains over random grids: every tile of every product is some block's, once,
 *     and each block meets its tiles in chain order; a block's last tile of each product is flagged
 *     (ts_tile_last_of_product), and the blocks' counts at those tiles add up to the product's tiles;
 *   - the chain's waits: blocks stepping in random order, each tile waiting for its product's input to
 *     be complete, always finish when every product reads an earlier one, and the same simulation
 *     reports a deadlock for a chain whose product reads a later one (so it can fail). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cuda/persist_sched.h"

#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

static void test_ring_edges(void **state) {
    (void)state;
    ts_ring r;
    ts_ring_init(&r, 1024);
    assert_int_equal(ts_ring_place(&r, 1024), 0); /* empty: the whole ring */
    ts_ring_push(&r, 0, 512);
    assert_int_equal(ts_ring_place(&r, 512), 512);
    assert_int_equal(ts_ring_place(&r, 513), -1);
    ts_ring_push(&r, 512, 512);
    assert_int_equal(ts_ring_place(&r, 1), -1); /* full (head = size, tail = 0) */
    ts_ring_release(&r);                        /* [0, 512) free */
    assert_int_equal(ts_ring_place(&r, 512), 0);
    assert_int_equal(ts_ring_place(&r, 513), -1);
    ts_ring_push(&r, 0, 256);
    assert_int_equal(ts_ring_at(&r, 1), 512);
    assert_int_equal(ts_ring_at(&r, 2), 0);
    assert_int_equal(ts_ring_place(&r, 256), 256); /* [256, 512) up to the live tile at 512 */
    assert_int_equal(ts_ring_place(&r, 257), -1);
    ts_ring_release(&r);
    ts_ring_release(&r); /* empty again: back to 0 whatever head was */
    assert_int_equal(ts_ring_place(&r, 1024), 0);

    ts_ring_init(&r, 1 << 20); /* the count limit, not the bytes */
    for (int i = 0; i < TS_RING_MAX; i++) {
        const int64_t off = ts_ring_place(&r, 128);
        assert_int_equal(off, 128 * i);
        ts_ring_push(&r, (uint32_t)off, 128);
    }
    assert_int_equal(ts_ring_place(&r, 128), -1);
    ts_ring_release(&r);
    assert_int_equal(ts_ring_place(&r, 128), 128 * TS_RING_MAX);
}

static void test_ring_random(void **state) {
    (void)state;
    enum { SIZE = 64 * 128, TILES = 20000 };
    static int owner[SIZE];
    for (int trial = 0; trial < 4; trial++) {
        ts_ring r;
        ts_ring_init(&r, SIZE);
        for (int i = 0; i < SIZE; i++) owner[i] = -1;
        uint32_t bytes[TS_RING_MAX], issued = 0, released = 0;
        uint32_t next = 128 * (1 + rnd(trial == 3 ? 64 : 24)); /* the next tile's size */
        while (released < TILES) {
            const int64_t off = issued < TILES ? ts_ring_place(&r, next) : -1;
            if (off >= 0 && rnd(3) != 0) {
                assert_true(off + next <= SIZE);
                for (uint32_t b = 0; b < next; b++) assert_int_equal(owner[off + b], -1);
                for (uint32_t b = 0; b < next; b++) owner[off + b] = (int)issued;
                ts_ring_push(&r, (uint32_t)off, next);
                bytes[issued % TS_RING_MAX] = next;
                issued++;
                next = 128 * (1 + rnd(trial == 3 ? 64 : 24));
                continue;
            }
            if (issued == released) { /* an empty ring must take the next tile */
                assert_true(off >= 0);
                continue;
            }
            const uint32_t o = ts_ring_at(&r, released);
            for (uint32_t b = 0; b < bytes[released % TS_RING_MAX]; b++) {
                assert_int_equal(owner[o + b], (int)released);
                owner[o + b] = -1;
            }
            ts_ring_release(&r);
            released++;
        }
    }
}

/* Products of random tile counts: prod_tile0 prefix sums in t0[0..n]. */
static int random_chain(int *t0, int n, int max_tiles) {
    t0[0] = 0;
    for (int p = 0; p < n; p++) t0[p + 1] = t0[p] + 1 + (int)rnd((uint32_t)max_tiles);
    return t0[n];
}

static void test_tiles(void **state) {
    (void)state;
    enum { NP = 40 };
    int t0[NP + 1];
    static unsigned char seen[NP * 300];
    int counted[NP];
    for (int trial = 0; trial < 50; trial++) {
        const int n = 1 + (int)rnd(NP), total = random_chain(t0, n, trial % 2 ? 300 : 5);
        const int grid = 1 + (int)rnd(300);
        memset(seen, 0, sizeof seen);
        memset(counted, 0, sizeof counted);
        int sum = 0;
        for (int b = 0; b < grid; b++) {
            ts_tile_cursor c = {0, 0};
            const int mine = ts_tiles_of_block(total, b, grid);
            sum += mine;
            int last = -1, run = 0; /* this block's tiles of product c.p so far */
            for (int j = 0; j < mine; j++) {
                const int g = b + j * grid;
                ts_tile_seek(t0, n, g, &c);
                run++;
                /* the last of its product: the next tile is another product's, or there is none */
                ts_tile_cursor nc = c;
                const int is_last = j + 1 == mine || (ts_tile_seek(t0, n, g + grid, &nc), nc.p != c.p);
                assert_int_equal(ts_tile_last_of_product(t0, c.p, g, grid) != 0, is_last);
                if (is_last) counted[c.p] += run, run = 0;
                assert_true(c.p >= 0 && c.p < n);
                assert_true(c.tile >= 0 && c.tile < t0[c.p + 1] - t0[c.p]);
                assert_int_equal(t0[c.p] + c.tile, g);
                assert_true(g > last);
                last = g;
                seen[g]++;
            }
        }
        assert_int_equal(sum, total);
        for (int g = 0; g < total; g++) assert_int_equal(seen[g], 1);
        for (int p = 0; p < n; p++) assert_int_equal(counted[p], t0[p + 1] - t0[p]); /* the counts add up */
    }
}

/* Blocks stepping in random order; a tile of product p runs once dep[p]'s tiles are all counted, and a
 * block counts its tiles of a product at its last tile of it. Returns 1 when every tile ran, 0 on a
 * deadlock (no block can step, tiles left). */
static int simulate(const int *t0, const int *dep, int n, int grid) {
    int total = t0[n], left = total;
    int *done = calloc((size_t)n, sizeof *done), *j = calloc((size_t)grid, sizeof *j);
    ts_tile_cursor *c = calloc((size_t)grid, sizeof *c);
    int *ready = malloc((size_t)grid * sizeof *ready), *pend = calloc((size_t)grid, sizeof *pend);
    while (left > 0) {
        int nr = 0;
        for (int b = 0; b < grid; b++) {
            if (j[b] >= ts_tiles_of_block(total, b, grid)) continue;
            ts_tile_seek(t0, n, b + j[b] * grid, &c[b]);
            const int d = dep[c[b].p];
            if (d < 0 || done[d] == t0[d + 1] - t0[d]) ready[nr++] = b;
        }
        if (nr == 0) break;
        const int b = ready[rnd((uint32_t)nr)], g = b + j[b] * grid;
        /* the block counts its tiles of a product at its last one (as the kernel's warp 0 does) */
        pend[b]++, j[b]++, left--;
        if (ts_tile_last_of_product(t0, c[b].p, g, grid)) done[c[b].p] += pend[b], pend[b] = 0;
    }
    for (int b = 0; b < grid; b++) assert_int_equal(pend[b], 0); /* every tile counted */
    free(done), free(j), free(c), free(ready), free(pend);
    return left == 0;
}

static void test_chain_waits(void **state) {
    (void)state;
    enum { NP = 30 };
    int t0[NP + 1], dep[NP];
    for (int trial = 0; trial < 200; trial++) {
        const int n = 2 + (int)rnd(NP - 1);
        random_chain(t0, n, trial % 3 ? 40 : 3);
        for (int p = 0; p < n; p++) dep[p] = p == 0 || rnd(5) == 0 ? -1 : (int)rnd((uint32_t)p);
        const int grid = 1 + (int)rnd(200);
        assert_true(simulate(t0, dep, n, grid));
        /* a product that reads a later one: the simulation must report the deadlock */
        const int p = (int)rnd((uint32_t)(n - 1));
        dep[p] = p + 1 + (int)rnd((uint32_t)(n - 1 - p));
        dep[dep[p]] = p; /* and that one reads p: neither can finish */
        assert_false(simulate(t0, dep, n, grid));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_edges),
        cmocka_unit_test(test_ring_random),
        cmocka_unit_test(test_tiles),
        cmocka_unit_test(test_chain_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
