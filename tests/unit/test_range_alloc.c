/* First-fit ranges in a fixed span (src/common/range_alloc.h), the allocator of the GPU memory the
 * CUDA backend reserves for snapshots:
 *   - rounding to the alignment, a span rounded down, zero-byte ranges, a range larger than the
 *     span, freeing an offset that is not in use;
 *   - freed neighbours coalescing (a range fits again once the ranges around a gap are freed);
 *   - random takes and gives against a reference map of the span's units: every offset is the
 *     lowest where the rounded size fits, ranges never overlap, ts_range_fits agrees with
 *     ts_range_take, and the used bytes and counts match. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/range_alloc.h"

#include <stdlib.h>
#include <string.h>

static void test_edges(void **state) {
    (void)state;
    assert_null(ts_range_alloc_new(1000, 3)); /* not a power of two */
    ts_range_alloc *a = ts_range_alloc_new(1000, 256);
    assert_non_null(a);
    assert_int_equal(ts_range_size(a), 768);
    size_t o1, o2, o3, o4;
    assert_true(ts_range_take(a, 1, &o1));
    assert_int_equal(o1, 0);
    assert_int_equal(ts_range_used(a), 256);
    assert_true(ts_range_take(a, 0, &o2)); /* zero bytes: one unit */
    assert_int_equal(o2, 256);
    assert_true(ts_range_take(a, 256, &o3));
    assert_int_equal(o3, 512);
    assert_false(ts_range_fits(a, 1));
    assert_false(ts_range_take(a, 1, &o4));
    assert_false(ts_range_take(a, SIZE_MAX, &o4)); /* rounding would overflow */
    assert_false(ts_range_give(a, 100));           /* not an offset in use */
    assert_true(ts_range_give(a, o2));
    assert_false(ts_range_give(a, o2)); /* twice */
    assert_false(ts_range_fits(a, 257));
    assert_true(ts_range_give(a, o1)); /* the gap [0, 512) coalesces */
    assert_true(ts_range_fits(a, 512));
    assert_false(ts_range_fits(a, 513));
    assert_true(ts_range_take(a, 300, &o4));
    assert_int_equal(o4, 0);
    assert_int_equal(ts_range_used(a), 768);
    assert_int_equal(ts_range_count(a), 2);
    assert_true(ts_range_give(a, o3) && ts_range_give(a, o4));
    assert_int_equal(ts_range_used(a), 0);
    assert_true(ts_range_fits(a, 768));
    assert_false(ts_range_fits(a, 769));
    ts_range_alloc_free(a);
}

enum { UNITS = 64, ALIGN = 16 };

/* The lowest unit where `units` free units start in the reference map, or -1. */
static int first_fit(const bool *busy, int units) {
    for (int s = 0; s + units <= UNITS; s++) {
        int k = 0;
        while (k < units && !busy[s + k]) k++;
        if (k == units) return s;
    }
    return -1;
}

static void test_random_against_reference(void **state) {
    (void)state;
    srand(7);
    for (int round = 0; round < 20; round++) {
        ts_range_alloc *a = ts_range_alloc_new(UNITS * ALIGN, ALIGN);
        assert_non_null(a);
        bool busy[UNITS];  /* each unit of the span in use */
        size_t off[UNITS]; /* live ranges' offsets */
        int units[UNITS];  /* and their units */
        int n = 0, used = 0;
        for (int i = 0; i < UNITS; i++) busy[i] = false;
        for (int step = 0; step < 2000; step++) {
            if (n > 0 && rand() % 2) { /* give a random live range */
                const int k = rand() % n;
                assert_true(ts_range_give(a, off[k]));
                for (int u = 0; u < units[k]; u++) busy[off[k] / ALIGN + u] = false;
                used -= units[k];
                off[k] = off[n - 1], units[k] = units[n - 1], n--;
                continue;
            }
            const size_t bytes = (size_t)(rand() % (12 * ALIGN)); /* 0 .. 12 units, not aligned */
            const int want = bytes == 0 ? 1 : (int)((bytes + ALIGN - 1) / ALIGN);
            const int expect = first_fit(busy, want);
            size_t o = 0;
            assert_int_equal(ts_range_fits(a, bytes), expect >= 0);
            const bool took = ts_range_take(a, bytes, &o);
            assert_int_equal(took, expect >= 0);
            if (!took) continue;
            assert_int_equal(o, (size_t)expect * ALIGN);
            for (int u = 0; u < want; u++) busy[expect + u] = true;
            off[n] = o, units[n] = want, n++;
            used += want;
            assert_int_equal(ts_range_used(a), (size_t)used * ALIGN);
            assert_int_equal(ts_range_count(a), (size_t)n);
        }
        for (int k = 0; k < n; k++) assert_true(ts_range_give(a, off[k]));
        assert_int_equal(ts_range_used(a), 0);
        assert_true(ts_range_fits(a, UNITS * ALIGN));
        ts_range_alloc_free(a);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_random_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
