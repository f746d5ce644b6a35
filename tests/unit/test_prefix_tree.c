/* The prefix cache's radix tree (src/server/prefix_tree.h), alone:
 *   - edge splits (a key ending or parting inside an edge) and merges (a removal leaving a node with
 *     no entry and one child), with the tree's bytes equal to the header's formula at each step and
 *     entry pointers that survive both;
 *   - the budget and the LRU order: which entries an insertion evicts, an entry too large for the
 *     whole budget refused without evicting, one that fits only alone evicting everything;
 *   - empty keys, duplicate inserts, the rule that a whole prompt needs an entry with logits;
 *   - random insert / lookup / touch / remove sequences against a brute-force reference (a list of
 *     keys scanned linearly, as the scheduler's cache was, with the tree's bytes computed from the
 *     key set alone), several budgets and seeds;
 *   - allocation failures, each allocation of an insertion and of a removal in turn and then at
 *     random: the tree stays consistent (ts_prefix_tree_check), within its budget, and every
 *     snapshot is given back exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/prefix_tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- snapshots and allocations the test can see ---------------------------------------------- */

#define MAX_SNAPS 40000
static int g_snap[MAX_SNAPS];  /* a snapshot is a pointer into this array */
static int g_freed[MAX_SNAPS]; /* times each was given back */
static int g_n_snaps;

static void *new_snap(void) {
    assert_true(g_n_snaps < MAX_SNAPS);
    g_freed[g_n_snaps] = 0;
    return &g_snap[g_n_snaps++];
}

static int snap_id(const void *p) {
    return (int)((const int *)p - g_snap);
}

static void free_snap(void *p) {
    if (++g_freed[snap_id(p)] > 1) fail_msg("snapshot %d given back twice", snap_id(p));
}

static uint64_t g_rng = 1;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

static long g_fail_at;    /* > 0: the g_fail_at-th allocation from now fails */
static unsigned g_fail_1; /* > 0: each allocation fails with probability 1 / g_fail_1 */
static long g_allocs;     /* allocations asked for */

static void *flaky_realloc(void *p, size_t size) {
    g_allocs++;
    if (g_fail_at > 0 && --g_fail_at == 0) return NULL;
    if (g_fail_1 && rnd() % g_fail_1 == 0) return NULL;
    return realloc(p, size);
}

#define N_LOGITS 8
#define ROW (N_LOGITS * sizeof(float))

static ts_prefix_tree *tree(size_t budget) {
    ts_prefix_tree *t;
    ts_prefix_tree_params p = {
        .budget = budget, .n_logits = N_LOGITS, .free_snap = free_snap, .realloc_fn = flaky_realloc};
    assert_int_equal(ts_prefix_tree_new(&p, &t), 0);
    return t;
}

static void check(const ts_prefix_tree *t, bool compact) {
    char err[256];
    size_t unmerged;
    if (ts_prefix_tree_check(t, &unmerged, err, sizeof err)) fail_msg("%s", err);
    if (compact && unmerged) fail_msg("%zu nodes with no entry and one child", unmerged);
}

static const float *logits_row(float v) {
    static float row[N_LOGITS];
    for (int i = 0; i < N_LOGITS; i++) row[i] = v + (float)i;
    return row;
}

/* put with a fresh snapshot of snap_bytes; returns put's result and *ev its evictions */
static int put(ts_prefix_tree *t, const int32_t *ids, size_t n, size_t snap_bytes, bool logits,
               uint64_t *ev) {
    return ts_prefix_tree_put(t, ids, n, new_snap(), snap_bytes, logits ? logits_row((float)n) : NULL, ev);
}

#define KEY(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

/* ---- directed ------------------------------------------------------------------------------- */

static void test_splits_and_merges(void **state) {
    (void)state;
    const size_t NB = ts_prefix_tree_node_bytes(), S = 100;
    ts_prefix_tree *t = tree(1 << 20);
    uint64_t ev;
    assert_int_equal(put(t, KEY(1, 2, 3, 4), S, true, &ev), 0);
    assert_int_equal(ts_prefix_tree_bytes(t), S + ROW + NB + 4 * 4);
    ts_prefix_entry *e1234 = ts_prefix_tree_get(t, KEY(1, 2, 3, 4));
    assert_non_null(e1234);
    /* parts inside the edge: a node "1 2" above "3 4" and a leaf "5" */
    assert_int_equal(put(t, KEY(1, 2, 5), S, true, &ev), 0);
    assert_int_equal(ts_prefix_tree_bytes(t), 2 * (S + ROW) + 3 * NB + 5 * 4);
    /* ends at that node: no new node */
    assert_int_equal(put(t, KEY(1, 2), S, false, &ev), 0);
    assert_int_equal(ts_prefix_tree_bytes(t), 3 * S + 2 * ROW + 3 * NB + 5 * 4);
    /* ends inside the edge "1 2": a node "1" above "2" */
    assert_int_equal(put(t, KEY(1), S, true, &ev), 0);
    assert_int_equal(ts_prefix_tree_bytes(t), 4 * S + 3 * ROW + 4 * NB + 5 * 4);
    check(t, true);
    assert_ptr_equal(ts_prefix_tree_get(t, KEY(1, 2, 3, 4)), e1234);
    assert_int_equal(ts_prefix_tree_entries(t), 4);

    ts_prefix_entry *e;
    assert_non_null(e = ts_prefix_tree_find(t, KEY(1, 2, 5, 7)));
    assert_int_equal(e->n, 3);
    assert_non_null(e = ts_prefix_tree_find(t, KEY(1, 2, 3)));
    assert_int_equal(e->n, 2);
    assert_non_null(e = ts_prefix_tree_find(t, KEY(1, 2))); /* "1 2" itself has no logits */
    assert_int_equal(e->n, 1);
    assert_non_null(e = ts_prefix_tree_find(t, KEY(1, 2, 3, 4)));
    assert_ptr_equal(e, e1234);
    assert_null(ts_prefix_tree_find(t, KEY(9, 1, 2)));
    assert_null(ts_prefix_tree_find(t, KEY(2)));
    assert_null(ts_prefix_tree_get(t, KEY(1, 2, 3)));

    /* "1 2" loses its entry but keeps two children: nothing else changes */
    ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(1, 2)));
    assert_int_equal(ts_prefix_tree_bytes(t), 3 * S + 3 * ROW + 4 * NB + 5 * 4);
    check(t, true);
    /* "5" goes; "1 2" is left with no entry and one child: it merges into "3 4" (now "2 3 4") */
    ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(1, 2, 5)));
    assert_int_equal(ts_prefix_tree_bytes(t), 2 * (S + ROW) + 2 * NB + 4 * 4);
    check(t, true);
    assert_ptr_equal(ts_prefix_tree_get(t, KEY(1, 2, 3, 4)), e1234);
    assert_null(ts_prefix_tree_get(t, KEY(1, 2)));
    /* "1" loses its entry: it merges too, into one node "1 2 3 4" */
    ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(1)));
    assert_int_equal(ts_prefix_tree_bytes(t), S + ROW + NB + 4 * 4);
    check(t, true);
    assert_ptr_equal(ts_prefix_tree_find(t, KEY(1, 2, 3, 4, 5)), e1234);
    assert_null(ts_prefix_tree_find(t, KEY(1, 2, 3)));
    ts_prefix_tree_remove(t, e1234);
    assert_int_equal(ts_prefix_tree_bytes(t), 0);
    assert_int_equal(ts_prefix_tree_entries(t), 0);
    check(t, true);

    /* children kept in order whatever the order of insertion */
    assert_int_equal(put(t, KEY(3, 1), S, true, &ev), 0);
    assert_int_equal(put(t, KEY(1, 1), S, true, &ev), 0);
    assert_int_equal(put(t, KEY(2, 1), S, true, &ev), 0);
    assert_int_equal(put(t, KEY(2, 0), S, true, &ev), 0);
    assert_int_equal(put(t, KEY(-5), S, true, &ev), 0);
    check(t, true);
    assert_int_equal(ts_prefix_tree_find(t, KEY(2, 0, 0))->n, 2);
    assert_int_equal(ts_prefix_tree_find(t, KEY(-5, 0, 0))->n, 1);
    ts_prefix_tree_free(t);
    for (int i = 0; i < g_n_snaps; i++) assert_int_equal(g_freed[i], 1);
    g_n_snaps = 0;
}

static void test_budget_and_lru(void **state) {
    (void)state;
    const size_t NB = ts_prefix_tree_node_bytes(), S = 1000, one = S + ROW + NB + 4;
    ts_prefix_tree *t = tree(3 * one);
    uint64_t ev;
    assert_int_equal(put(t, KEY(1), S, true, &ev), 0);
    assert_int_equal(ev, 0);
    assert_int_equal(put(t, KEY(2), S, true, &ev), 0);
    assert_int_equal(put(t, KEY(3), S, true, &ev), 0);
    assert_int_equal(ev, 0);
    assert_int_equal(ts_prefix_tree_bytes(t), 3 * one);
    ts_prefix_tree_touch(t, ts_prefix_tree_find(t, KEY(1, 9))); /* 1 is used: 2 is the oldest */
    assert_int_equal(put(t, KEY(4), S, true, &ev), 0);
    assert_int_equal(ev, 1);
    assert_null(ts_prefix_tree_get(t, KEY(2)));
    ts_prefix_tree_touch(t, ts_prefix_tree_get(t, KEY(3))); /* order now 1, 4, 3 */
    assert_int_equal(put(t, KEY(5), S, true, &ev), 0);
    assert_int_equal(ev, 1);
    assert_null(ts_prefix_tree_get(t, KEY(1)));
    assert_non_null(ts_prefix_tree_get(t, KEY(3)));
    assert_non_null(ts_prefix_tree_get(t, KEY(4)));
    check(t, true);
    /* a longer key costs its tokens: two go for it */
    assert_int_equal(put(t, KEY(6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6), S + ROW + NB, false, &ev), 0);
    assert_int_equal(ev, 2);
    assert_non_null(ts_prefix_tree_get(t, KEY(5)));
    assert_true(ts_prefix_tree_bytes(t) <= 3 * one);
    /* larger than the whole budget: refused, nothing evicted, its snapshot given back */
    const int refused = g_n_snaps;
    assert_int_equal(put(t, KEY(7), 3 * one - NB - 4 + 1, false, &ev), -1);
    assert_int_equal(ev, 0);
    assert_int_equal(g_freed[refused], 1);
    assert_int_equal(ts_prefix_tree_entries(t), 2);
    /* fits only alone: everything else goes, and the budget is full to the byte */
    assert_int_equal(put(t, KEY(7), 3 * one - NB - 4, false, &ev), 0);
    assert_int_equal(ev, 2);
    assert_int_equal(ts_prefix_tree_bytes(t), 3 * one);
    check(t, true);
    /* logits added to a full tree: the others make room, never the entry itself */
    ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(7)));
    assert_int_equal(put(t, KEY(1), S + ROW, false, &ev), 0);
    assert_int_equal(put(t, KEY(2), S, true, &ev), 0);
    assert_int_equal(put(t, KEY(3), S + ROW, false, &ev), 0);
    assert_int_equal(ts_prefix_tree_bytes(t), 3 * one);
    ts_prefix_entry *e1 = ts_prefix_tree_get(t, KEY(1));
    assert_int_equal(ts_prefix_tree_add_logits(t, e1, logits_row(1), &ev),
                     -1); /* the oldest: nothing older */
    assert_int_equal(ev, 0);
    ts_prefix_tree_touch(t, e1);
    assert_int_equal(ts_prefix_tree_add_logits(t, e1, logits_row(1), &ev), 0);
    assert_int_equal(ev, 1);
    assert_null(ts_prefix_tree_get(t, KEY(2)));
    assert_true(e1->logits && e1->logits[3] == 4.0f && e1->bytes == S + 2 * ROW);
    check(t, true);
    ts_prefix_tree_free(t);
    for (int i = 0; i < g_n_snaps; i++) assert_int_equal(g_freed[i], 1);
    g_n_snaps = 0;
}

/* A snapshot moved between memories (the GPU tier spilling into host memory): the entry's stated
 * bytes change, growing evicts only entries less recently used than it, and the LRU walk sees the
 * order touch and put make. */
static void test_snapshot_resize_and_walk(void **state) {
    (void)state;
    const size_t NB = ts_prefix_tree_node_bytes(), S = 10000, one = S + NB + 4;
    ts_prefix_tree *t = tree(4 * one);
    uint64_t ev;
    assert_null(ts_prefix_tree_newer(t, NULL));
    assert_int_equal(put(t, KEY(1), 10, false, &ev), 0); /* small: its state is elsewhere */
    assert_int_equal(put(t, KEY(2), S, false, &ev), 0);
    assert_int_equal(put(t, KEY(3), 10, true, &ev), 0);
    assert_int_equal(put(t, KEY(4), S, false, &ev), 0);
    ts_prefix_entry *e1 = ts_prefix_tree_get(t, KEY(1)), *e3 = ts_prefix_tree_get(t, KEY(3));
    ts_prefix_tree_touch(t, e1); /* order: 2, 3, 4, 1 */
    const int32_t order[] = {2, 3, 4, 1};
    ts_prefix_entry *e = NULL;
    for (int i = 0; i < 4; i++) {
        e = ts_prefix_tree_newer(t, e);
        assert_non_null(e);
        assert_int_equal(e->n, 1);
        assert_ptr_equal(e, ts_prefix_tree_get(t, &order[i], 1));
    }
    assert_null(ts_prefix_tree_newer(t, e));
    /* shrinking and growing within the budget: the bytes follow, nothing evicted */
    const size_t before = ts_prefix_tree_bytes(t);
    assert_int_equal(ts_prefix_tree_set_snap_bytes(t, e3, 20, &ev), 0);
    assert_int_equal(ev, 0);
    assert_int_equal(e3->bytes, 20 + ROW);
    assert_int_equal(ts_prefix_tree_bytes(t), before + 10);
    assert_int_equal(ts_prefix_tree_set_snap_bytes(t, e3, 10, &ev), 0);
    assert_int_equal(ts_prefix_tree_bytes(t), before);
    /* 3 grows past the room left: 2, older, goes; 4 and 1, newer, stay */
    assert_int_equal(ts_prefix_tree_set_snap_bytes(t, e3, 3 * S, &ev), 0);
    assert_int_equal(ev, 1);
    assert_null(ts_prefix_tree_get(t, KEY(2)));
    assert_non_null(ts_prefix_tree_get(t, KEY(4)));
    assert_int_equal(e3->bytes, 3 * S + ROW);
    check(t, true);
    /* 3 is the oldest now: growing past the budget evicts nothing newer and is refused, unchanged */
    const size_t full = ts_prefix_tree_bytes(t);
    assert_int_equal(ts_prefix_tree_set_snap_bytes(t, e3, 4 * one, &ev), -1);
    assert_int_equal(ev, 0);
    assert_int_equal(ts_prefix_tree_bytes(t), full);
    assert_int_equal(ts_prefix_tree_entries(t), 3);
    /* 1 grows past the little room left: 3 and 4, both older, go in that order as far as needed */
    assert_true(4 * one - ts_prefix_tree_bytes(t) < 200);
    assert_int_equal(ts_prefix_tree_set_snap_bytes(t, e1, 210, &ev), 0);
    assert_int_equal(ev, 1);
    assert_null(ts_prefix_tree_get(t, KEY(3)));
    assert_non_null(ts_prefix_tree_get(t, KEY(4)));
    assert_true(ts_prefix_tree_bytes(t) <= 4 * one);
    check(t, true);
    ts_prefix_tree_free(t);
    for (int i = 0; i < g_n_snaps; i++) assert_int_equal(g_freed[i], 1);
    g_n_snaps = 0;
}

static void test_empty_and_duplicates(void **state) {
    (void)state;
    const size_t NB = ts_prefix_tree_node_bytes(), S = 100;
    ts_prefix_tree *t = tree(1 << 20);
    uint64_t ev;
    const int32_t none[1] = {0};
    assert_int_equal(put(t, none, 0, S, true, &ev), -1);
    assert_int_equal(g_freed[0], 1);
    assert_null(ts_prefix_tree_find(t, none, 0));
    assert_null(ts_prefix_tree_get(t, none, 0));
    assert_int_equal(ts_prefix_tree_bytes(t), 0);
    /* a whole prompt needs its logits; a longer one takes it as a prefix */
    assert_int_equal(put(t, KEY(7, 8), S, false, &ev), 0);
    assert_null(ts_prefix_tree_find(t, KEY(7, 8)));
    assert_int_equal(ts_prefix_tree_find(t, KEY(7, 8, 9))->n, 2);
    ts_prefix_entry *e = ts_prefix_tree_get(t, KEY(7, 8));
    void *first = e->snap;
    /* again, with logits: the first snapshot stays, the second goes back, the logits come in */
    const int second = g_n_snaps;
    assert_int_equal(put(t, KEY(7, 8), S, true, &ev), 0);
    assert_int_equal(g_freed[second], 1);
    assert_ptr_equal(ts_prefix_tree_get(t, KEY(7, 8)), e);
    assert_ptr_equal(e->snap, first);
    assert_non_null(e->logits);
    assert_int_equal(e->bytes, S + ROW);
    assert_ptr_equal(ts_prefix_tree_find(t, KEY(7, 8)), e);
    assert_int_equal(ts_prefix_tree_bytes(t), S + ROW + NB + 2 * 4);
    /* and a third time: nothing changes */
    assert_int_equal(put(t, KEY(7, 8), S, true, &ev), 0);
    assert_int_equal(ts_prefix_tree_entries(t), 1);
    assert_int_equal(ts_prefix_tree_bytes(t), S + ROW + NB + 2 * 4);
    check(t, true);
    ts_prefix_tree_free(t);
    for (int i = 0; i < g_n_snaps; i++) assert_int_equal(g_freed[i], 1);
    g_n_snaps = 0;
}

/* ---- the brute-force reference -------------------------------------------------------------- */

#define MAX_KEY 12
#define MAX_REF 256

typedef struct ref_entry {
    int32_t key[MAX_KEY]; /* [n] */
    size_t n;
    size_t bytes;
    bool logits;
    uint64_t last_use;
    int snap;
} ref_entry;

typedef struct ref {
    ref_entry e[MAX_REF]; /* [n] in no order */
    int n;
    uint64_t clock;
    size_t budget;
} ref;

static size_t lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* The tree's own bytes for the keys of r (and `extra`, when not NULL), from the key set alone: a
 * node for every distinct prefix that is a key or where two keys part, 4 bytes for every distinct
 * non-empty prefix. A prefix is counted at the first key that has it. */
static size_t ref_tree_bytes(const ref *r, const int32_t *extra, size_t n_extra) {
    const int32_t *k[MAX_REF + 1];
    size_t n[MAX_REF + 1];
    int m = 0;
    for (int i = 0; i < r->n; i++) k[m] = r->e[i].key, n[m++] = r->e[i].n;
    if (extra) k[m] = extra, n[m++] = n_extra;
    static size_t l[MAX_REF + 1][MAX_REF + 1];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) l[i][j] = lcp(k[i], n[i], k[j], n[j]);
    size_t nodes = 0, prefixes = 0;
    for (int i = 0; i < m; i++)
        for (size_t len = 1; len <= n[i]; len++) {
            bool first = true, node = false, has_next = false;
            int32_t next = 0;
            for (int j = 0; j < m && first; j++) {
                if (l[i][j] < len) continue;
                if (j < i)
                    first = false;
                else if (n[j] == len)
                    node = true;
                else if (!has_next)
                    next = k[j][len], has_next = true;
                else if (k[j][len] != next)
                    node = true;
            }
            if (first) prefixes++, nodes += node;
        }
    return nodes * ts_prefix_tree_node_bytes() + prefixes * sizeof(int32_t);
}

static size_t ref_bytes(const ref *r) {
    size_t b = ref_tree_bytes(r, NULL, 0);
    for (int i = 0; i < r->n; i++) b += r->e[i].bytes;
    return b;
}

static int ref_get(const ref *r, const int32_t *ids, size_t n) {
    for (int i = 0; i < r->n; i++)
        if (r->e[i].n == n && !memcmp(r->e[i].key, ids, n * sizeof *ids)) return i;
    return -1;
}

/* The old cache_find: the longest entry whose tokens begin the prompt, shorter or with logits. */
static int ref_find(const ref *r, const int32_t *ids, size_t n) {
    int best = -1;
    for (int i = 0; i < r->n; i++) {
        const ref_entry *e = &r->e[i];
        if ((e->n < n || (e->n == n && e->logits)) && (best < 0 || e->n > r->e[best].n) &&
            !memcmp(e->key, ids, e->n * sizeof *ids))
            best = i;
    }
    return best;
}

static int ref_oldest(const ref *r) {
    int o = 0;
    for (int i = 1; i < r->n; i++)
        if (r->e[i].last_use < r->e[o].last_use) o = i;
    return o;
}

static void ref_drop(ref *r, int i) {
    r->e[i] = r->e[--r->n];
}

static int ref_add_logits(ref *r, int i, uint64_t *ev) {
    *ev = 0;
    if (r->e[i].logits) return 0;
    int32_t key[MAX_KEY];
    const size_t n = r->e[i].n;
    memcpy(key, r->e[i].key, n * sizeof *key);
    while (ref_bytes(r) + ROW > r->budget && ref_oldest(r) != i) {
        ref_drop(r, ref_oldest(r)), ++*ev;
        i = ref_get(r, key, n);
    }
    if (ref_bytes(r) + ROW > r->budget) return -1;
    r->e[i].logits = true, r->e[i].bytes += ROW;
    return 0;
}

static int ref_put(ref *r, const int32_t *ids, size_t n, size_t snap_bytes, bool logits, int snap,
                   uint64_t *ev) {
    *ev = 0;
    int i = n ? ref_get(r, ids, n) : -1;
    if (i >= 0) {
        r->e[i].last_use = ++r->clock;
        return logits ? ref_add_logits(r, i, ev) : 0;
    }
    const size_t bytes = snap_bytes + (logits ? ROW : 0);
    if (n == 0 || bytes + ts_prefix_tree_node_bytes() + n * sizeof *ids > r->budget) return -1;
    while (r->n > 0 &&
           ref_bytes(r) - ref_tree_bytes(r, NULL, 0) + ref_tree_bytes(r, ids, n) + bytes > r->budget)
        ref_drop(r, ref_oldest(r)), ++*ev;
    assert_true(r->n < MAX_REF);
    ref_entry *e = &r->e[r->n++];
    memcpy(e->key, ids, n * sizeof *ids);
    e->n = n, e->bytes = bytes, e->logits = logits, e->last_use = ++r->clock, e->snap = snap;
    return 0;
}

/* ---- random sequences ----------------------------------------------------------------------- */

/* A key: often an existing one cut somewhere and continued, so that edges split and merge. */
static size_t random_key(const ref *r, int32_t *key, int alphabet) {
    size_t n = 0;
    if (r->n && rnd() % 2) {
        const ref_entry *e = &r->e[rnd() % (uint32_t)r->n];
        n = rnd() % (e->n + 1);
        memcpy(key, e->key, n * sizeof *key);
    }
    size_t want = rnd() % (MAX_KEY + 1);
    while (n < want) key[n++] = (int32_t)(rnd() % (uint32_t)alphabet);
    return n;
}

/* Everything the tree and the reference should agree on. With failures (`exact` false) the
 * reference first takes from the tree what allocation failures decided: which entries are there,
 * which have logits. */
static void compare(ts_prefix_tree *t, ref *r, bool exact) {
    if (!exact)
        for (int i = r->n - 1; i >= 0; i--) {
            ts_prefix_entry *e = ts_prefix_tree_get(t, r->e[i].key, r->e[i].n);
            if (!e) {
                ref_drop(r, i);
                continue;
            }
            r->e[i].logits = e->logits != NULL, r->e[i].bytes = e->bytes;
        }
    check(t, exact);
    assert_int_equal(ts_prefix_tree_entries(t), (size_t)r->n);
    if (exact) assert_int_equal(ts_prefix_tree_bytes(t), ref_bytes(r));
    assert_true(ts_prefix_tree_bytes(t) <= r->budget);
    for (int i = 0; i < r->n; i++) {
        const ref_entry *x = &r->e[i];
        ts_prefix_entry *e = ts_prefix_tree_get(t, x->key, x->n);
        if (!e) fail_msg("entry %d of %zu tokens missing", i, x->n);
        assert_int_equal(e->n, x->n);
        assert_int_equal(e->bytes, x->bytes);
        assert_int_equal(e->logits != NULL, x->logits);
        if (e->logits) assert_true(e->logits[1] == (float)x->n + 1.0f);
        assert_int_equal(snap_id(e->snap), x->snap);
    }
}

static void check_snaps(const ref *r) {
    static bool alive[MAX_SNAPS];
    memset(alive, 0, sizeof alive);
    for (int i = 0; i < r->n; i++) alive[r->e[i].snap] = true;
    for (int s = 0; s < g_n_snaps; s++)
        if (g_freed[s] != (alive[s] ? 0 : 1)) fail_msg("snapshot %d given back %d times", s, g_freed[s]);
}

static void random_run(uint64_t seed, size_t budget, int alphabet, int steps, unsigned fail_1) {
    g_rng = seed, g_n_snaps = 0;
    static ref r;
    memset(&r, 0, sizeof r);
    r.budget = budget;
    ts_prefix_tree *t = tree(budget);
    g_fail_1 = fail_1;
    const bool exact = fail_1 == 0;
    int32_t key[MAX_KEY + 4];
    for (int step = 0; step < steps; step++) {
        const uint32_t op = rnd() % 100;
        uint64_t ev = 0, rev = 0;
        if (op < 45) { /* insert */
            size_t n = random_key(&r, key, alphabet), sb = 40 + rnd() % 400;
            bool logits = rnd() % 2;
            int snap = g_n_snaps;
            int rc = put(t, key, n, sb, logits, &ev);
            if (exact) {
                int rrc = ref_put(&r, key, n, sb, logits, snap, &rev);
                assert_int_equal(rc, rrc);
                assert_int_equal(ev, rev);
            } else if (rc == 0 && ref_get(&r, key, n) < 0) {
                ref_entry *e = &r.e[r.n++];
                memcpy(e->key, key, n * sizeof *key);
                e->n = n, e->snap = snap; /* logits and bytes: compare() takes them */
            }
        } else if (op < 65) { /* admission: the longest prefix, used */
            size_t n = random_key(&r, key, alphabet);
            for (int extra = (int)(rnd() % 3); extra > 0 && n < MAX_KEY + 4; extra--)
                key[n++] = (int32_t)(rnd() % (uint32_t)alphabet);
            ts_prefix_entry *e = ts_prefix_tree_find(t, key, n);
            int i = ref_find(&r, key, n);
            if (i < 0) {
                if (e) fail_msg("found %zu tokens where the reference has none", e->n);
            } else {
                if (!e) fail_msg("found nothing where the reference has %zu tokens", r.e[i].n);
                assert_int_equal(e->n, r.e[i].n);
                assert_int_equal(snap_id(e->snap), r.e[i].snap);
                if (rnd() % 4) ts_prefix_tree_touch(t, e), r.e[i].last_use = ++r.clock;
            }
        } else if (op < 80) { /* the scheduler's cache_put of a state kept already */
            if (!r.n) continue;
            int i = (int)(rnd() % (uint32_t)r.n);
            ts_prefix_entry *e = ts_prefix_tree_get(t, r.e[i].key, r.e[i].n);
            assert_non_null(e);
            ts_prefix_tree_touch(t, e), r.e[i].last_use = ++r.clock;
            int rc = ts_prefix_tree_add_logits(t, e, logits_row((float)e->n), &ev);
            if (exact) {
                int rrc = ref_add_logits(&r, i, &rev);
                assert_int_equal(rc, rrc);
                assert_int_equal(ev, rev);
            }
        } else if (op < 90) { /* removal */
            if (!r.n) continue;
            int i = (int)(rnd() % (uint32_t)r.n);
            ts_prefix_tree_remove(t, ts_prefix_tree_get(t, r.e[i].key, r.e[i].n));
            ref_drop(&r, i);
        } else { /* a lookup of anything */
            size_t n = rnd() % (MAX_KEY + 2);
            for (size_t k = 0; k < n; k++) key[k] = (int32_t)(rnd() % (uint32_t)alphabet);
            ts_prefix_entry *e = ts_prefix_tree_find(t, key, n);
            int i = ref_find(&r, key, n);
            assert_int_equal(e ? (long)e->n : -1L, i < 0 ? -1L : (long)r.e[i].n);
        }
        compare(t, &r, exact);
        check_snaps(&r);
    }
    g_fail_1 = 0;
    ts_prefix_tree_free(t);
    for (int s = 0; s < g_n_snaps; s++) assert_int_equal(g_freed[s], 1);
    g_n_snaps = 0;
}

static void test_random_against_reference(void **state) {
    (void)state;
    const size_t NB = ts_prefix_tree_node_bytes();
    random_run(0x9e3779b97f4a7c15u, 4000 + 6 * NB, 3, 3000, 0);  /* a few entries, many evictions */
    random_run(0x2545f4914f6cdd1du, 8000 + 10 * NB, 2, 3000, 0); /* deep, narrow: splits everywhere */
    random_run(12345, 12000 + 20 * NB, 6, 2000, 0);              /* roomier, bushy */
    random_run(777, 1200 + 2 * NB, 4, 2000, 0);                  /* an entry or two at a time */
}

/* ---- allocation failures -------------------------------------------------------------------- */

static ts_prefix_tree *three_keys(void) {
    ts_prefix_tree *t = tree(1 << 20);
    uint64_t ev;
    assert_int_equal(put(t, KEY(1, 2, 3, 4), 100, true, &ev), 0);
    assert_int_equal(put(t, KEY(1, 2, 5), 100, true, &ev), 0);
    assert_int_equal(put(t, KEY(1, 2), 100, true, &ev), 0);
    return t;
}

static void test_allocation_failures(void **state) {
    (void)state;
    /* each allocation of an insertion that splits an edge and adds a leaf, in turn: refused, and
     * the tree exactly as it was */
    bool succeeded = false;
    for (long k = 1; !succeeded; k++) {
        g_n_snaps = 0;
        ts_prefix_tree *t = three_keys();
        const size_t before = ts_prefix_tree_bytes(t);
        uint64_t ev;
        g_fail_at = k;
        int rc = put(t, KEY(1, 2, 3, 9, 9), 100, true, &ev);
        succeeded = g_fail_at > 0; /* no allocation failed */
        g_fail_at = 0;
        check(t, true);
        if (succeeded) {
            assert_int_equal(rc, 0);
            assert_int_equal(ts_prefix_tree_entries(t), 4);
        } else {
            assert_int_equal(rc, -1);
            assert_int_equal(g_freed[3], 1);
            assert_int_equal(ts_prefix_tree_bytes(t), before);
            assert_int_equal(ts_prefix_tree_entries(t), 3);
            assert_null(ts_prefix_tree_get(t, KEY(1, 2, 3, 9, 9)));
        }
        assert_int_equal(ts_prefix_tree_find(t, KEY(1, 2, 3, 9))->n, 2);
        ts_prefix_tree_free(t);
        for (int i = 0; i < g_n_snaps; i++) assert_int_equal(g_freed[i], 1);
        assert_true(k < 20);
    }
    /* each allocation of removals that shrink a child array and merge: the removal still happens,
     * the tree stays correct (maybe one node less compact), and empties to 0 bytes */
    succeeded = false;
    for (long k = 1; !succeeded; k++) {
        g_n_snaps = 0;
        ts_prefix_tree *t = three_keys();
        ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(1, 2)));
        g_fail_at = k;
        ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(1, 2, 5)));
        succeeded = g_fail_at > 0;
        g_fail_at = 0;
        check(t, succeeded);
        assert_null(ts_prefix_tree_get(t, KEY(1, 2, 5)));
        assert_null(ts_prefix_tree_find(t, KEY(1, 2, 5)));
        assert_int_equal(ts_prefix_tree_find(t, KEY(1, 2, 3, 4, 0))->n, 4);
        uint64_t ev;
        assert_int_equal(put(t, KEY(1, 2, 6), 100, false, &ev), 0);
        check(t, false);
        ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(1, 2, 3, 4)));
        ts_prefix_tree_remove(t, ts_prefix_tree_get(t, KEY(1, 2, 6)));
        assert_int_equal(ts_prefix_tree_bytes(t), 0);
        check(t, true);
        ts_prefix_tree_free(t);
        for (int i = 0; i < g_n_snaps; i++) assert_int_equal(g_freed[i], 1);
        assert_true(k < 20);
    }
    /* and at random, one allocation in 6 */
    random_run(31337, 6000 + 10 * ts_prefix_tree_node_bytes(), 3, 3000, 6);
    random_run(4242, 12000, 2, 3000, 4);
}

static int fresh(void **state) {
    (void)state;
    g_n_snaps = 0, g_fail_at = 0, g_fail_1 = 0;
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_splits_and_merges, fresh),
        cmocka_unit_test(test_budget_and_lru),
        cmocka_unit_test(test_snapshot_resize_and_walk),
        cmocka_unit_test_setup(test_empty_and_duplicates, fresh),
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test_setup(test_allocation_failures, fresh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
