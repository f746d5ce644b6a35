/* The radix tree of token prefixes (see prefix_tree.h for the operations, the budget and ownership).
 *
 * Layout: a node owns its edge label (the tokens from its parent to it) and an array of its
 * children sorted by their label's first token, which is distinct among siblings; the array is
 * sized to its children exactly (grown by one, shrunk by one), so what the tree holds depends only
 * on its keys, which is what lets the unit test check the byte count against a brute-force
 * formula. An entry lives inside its node and a node holding one never moves: splits put a new node
 * above it, merges fold the node above it into it. */
#include "server/prefix_tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct node node;
struct node {
    ts_prefix_entry e;       /* the entry kept here, when has_entry (e.n == depth) */
    bool has_entry;          /* e holds an entry (never at the root) */
    node *parent;            /* NULL for the root */
    int32_t *label;          /* [n_label] the edge's tokens from the parent */
    size_t n_label;          /* ≥ 1, but 0 at the root */
    size_t depth;            /* tokens from the root to the end of the label */
    node **kids;             /* [cap_kids], the first n_kids used, sorted by their label[0] */
    size_t n_kids, cap_kids; /* cap_kids == n_kids but after a shrink whose allocation failed */
    node *newer, *older;     /* neighbours in the LRU list, while has_entry */
};

struct ts_prefix_tree {
    ts_prefix_tree_params p; /* as given to ts_prefix_tree_new */
    node root;               /* the empty prefix */
    node *newest, *oldest;   /* the LRU list's ends, NULL when there is no entry */
    size_t n_entries;        /* nodes with has_entry */
    size_t entry_bytes;      /* the sum of their e.bytes */
    size_t tree_bytes;       /* nodes but the root, labels and child arrays (the header's formula) */
};

static void *t_alloc(ts_prefix_tree *t, void *p, size_t size) {
    return t->p.realloc_fn ? t->p.realloc_fn(p, size) : realloc(p, size);
}

static node *node_of(ts_prefix_entry *e) {
    return (node *)((char *)e - offsetof(node, e));
}

size_t ts_prefix_tree_node_bytes(void) {
    return sizeof(node) + sizeof(node *);
}

size_t ts_prefix_tree_bytes(const ts_prefix_tree *t) {
    return t->entry_bytes + t->tree_bytes;
}

size_t ts_prefix_tree_entries(const ts_prefix_tree *t) {
    return t->n_entries;
}

/* Whether `add` more bytes stay within the budget. */
static bool fits(const ts_prefix_tree *t, size_t add) {
    const size_t used = ts_prefix_tree_bytes(t);
    return used <= t->p.budget && add <= t->p.budget - used;
}

/* ---- nodes ---------------------------------------------------------------------------------- */

/* Where the child of x whose label begins with tok is, or would go (*found tells). */
static size_t kid_slot(const node *x, int32_t tok, bool *found) {
    size_t lo = 0, hi = x->n_kids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->kids[mid]->label[0] < tok)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < x->n_kids && x->kids[lo]->label[0] == tok;
    return lo;
}

/* A node with a copy of label[0 .. n) ending at depth, or NULL when out of memory. */
static node *node_new(ts_prefix_tree *t, const int32_t *label, size_t n, size_t depth) {
    node *x = t_alloc(t, NULL, sizeof *x);
    int32_t *l = t_alloc(t, NULL, n * sizeof *l);
    if (!x || !l) {
        free(x), free(l);
        return NULL;
    }
    memset(x, 0, sizeof *x);
    memcpy(l, label, n * sizeof *l);
    x->label = l, x->n_label = n, x->depth = depth;
    t->tree_bytes += sizeof *x + n * sizeof *l;
    return x;
}

/* Frees x (no entry) and its label and child array, not its children. */
static void node_free(ts_prefix_tree *t, node *x) {
    t->tree_bytes -= sizeof *x + x->n_label * sizeof *x->label + x->cap_kids * sizeof *x->kids;
    free(x->label), free(x->kids), free(x);
}

/* Takes kid (a child of x) out of x's child array, which shrinks with it. */
static void kid_remove(ts_prefix_tree *t, node *x, const node *kid) {
    bool found;
    size_t i = kid_slot(x, kid->label[0], &found);
    memmove(x->kids + i, x->kids + i + 1, (x->n_kids - i - 1) * sizeof *x->kids);
    x->n_kids--;
    if (x->n_kids == 0) {
        free(x->kids);
        x->kids = NULL;
    } else {
        node **k = t_alloc(t, x->kids, x->n_kids * sizeof *k);
        if (!k) return; /* the block keeps its size: counted as it is */
        x->kids = k;
    }
    t->tree_bytes -= (x->cap_kids - x->n_kids) * sizeof *x->kids;
    x->cap_kids = x->n_kids;
}

/* ---- the LRU list --------------------------------------------------------------------------- */

static void lru_unlink(ts_prefix_tree *t, node *x) {
    if (x->newer)
        x->newer->older = x->older;
    else
        t->newest = x->older;
    if (x->older)
        x->older->newer = x->newer;
    else
        t->oldest = x->newer;
    x->newer = x->older = NULL;
}

static void lru_push(ts_prefix_tree *t, node *x) {
    x->older = t->newest, x->newer = NULL;
    if (t->newest)
        t->newest->newer = x;
    else
        t->oldest = x;
    t->newest = x;
}

void ts_prefix_tree_touch(ts_prefix_tree *t, ts_prefix_entry *e) {
    node *x = node_of(e);
    lru_unlink(t, x);
    lru_push(t, x);
}

/* ---- the walk ------------------------------------------------------------------------------- */

/* Where a key lies in the tree: it ends at `at` (kid NULL, at->depth == n), or parts from it with no
 * child to follow (kid NULL, at->depth < n; a new child would go at kids[slot]), or ends or parts
 * inside the edge of its child kid = at->kids[slot], after k of that edge's tokens. */
typedef struct place {
    node *at;    /* the deepest node whose whole path is a prefix of the key */
    node *kid;   /* the child whose edge the key ends or parts inside, or NULL */
    size_t slot; /* kid's index in at->kids, or where a new child would go */
    size_t k;    /* tokens of kid's label matched: 1 ≤ k < kid->n_label */
} place;

static place walk(ts_prefix_tree *t, const int32_t *ids, size_t n) {
    node *x = &t->root;
    for (;;) {
        place w = {.at = x};
        const size_t d = x->depth;
        bool found;
        if (d == n) return w;
        w.slot = kid_slot(x, ids[d], &found);
        if (!found) return w;
        node *c = x->kids[w.slot];
        const size_t m = n - d < c->n_label ? n - d : c->n_label;
        size_t k = 1;
        while (k < m && c->label[k] == ids[d + k]) k++;
        if (k == c->n_label) {
            x = c;
            continue;
        }
        w.kid = c, w.k = k;
        return w;
    }
}

ts_prefix_entry *ts_prefix_tree_find(ts_prefix_tree *t, const int32_t *ids, size_t n) {
    ts_prefix_entry *best = NULL;
    node *x = &t->root;
    while (x->depth < n) {
        bool found;
        size_t i = kid_slot(x, ids[x->depth], &found);
        if (!found) break;
        node *c = x->kids[i];
        if (c->n_label > n - x->depth || memcmp(c->label, ids + x->depth, c->n_label * sizeof *ids)) break;
        x = c;
        if (x->has_entry && (x->depth < n || x->e.logits)) best = &x->e;
    }
    return best;
}

ts_prefix_entry *ts_prefix_tree_get(ts_prefix_tree *t, const int32_t *ids, size_t n) {
    place w = walk(t, ids, n);
    return !w.kid && w.at->depth == n && w.at->has_entry ? &w.at->e : NULL;
}

/* The bytes of tree the key would add (its entry aside). */
static size_t insert_cost(ts_prefix_tree *t, const int32_t *ids, size_t n) {
    place w = walk(t, ids, n);
    const size_t nb = sizeof(node), pb = sizeof(node *), d = w.at->depth;
    if (!w.kid) /* ends at a node, or a new leaf under it */
        return d == n ? 0 : nb + (n - d) * sizeof *ids + (w.at->cap_kids > w.at->n_kids ? 0 : pb);
    /* a split: a node above kid with k of its tokens (kid keeps the rest), and a leaf if it parts */
    return d + w.k == n ? nb + pb : 2 * nb + 2 * pb + (n - d - w.k) * sizeof *ids;
}

/* ---- removal -------------------------------------------------------------------------------- */

/* x (no entry, one child) folds into its child, whose label grows in front. Skipped when out of
 * memory (the tree stays correct). */
static void merge_into_kid(ts_prefix_tree *t, node *x) {
    node *c = x->kids[0], *p = x->parent;
    int32_t *l = t_alloc(t, NULL, (x->n_label + c->n_label) * sizeof *l);
    if (!l) return;
    memcpy(l, x->label, x->n_label * sizeof *l);
    memcpy(l + x->n_label, c->label, c->n_label * sizeof *l);
    free(c->label);
    c->label = l, c->n_label += x->n_label;
    t->tree_bytes += x->n_label * sizeof *l;
    bool found;
    p->kids[kid_slot(p, x->label[0], &found)] = c; /* the same first token: the order holds */
    c->parent = p;
    node_free(t, x);
}

/* Removes what x no longer needs: x itself when it has neither entry nor child (then its parent
 * is looked at the same way), or the node x when it has no entry and one child. */
static void prune(ts_prefix_tree *t, node *x) {
    while (x != &t->root && !x->has_entry) {
        node *p = x->parent;
        if (x->n_kids == 0) {
            kid_remove(t, p, x);
            node_free(t, x);
            x = p;
            continue;
        }
        if (x->n_kids == 1) merge_into_kid(t, x);
        return;
    }
}

void ts_prefix_tree_remove(ts_prefix_tree *t, ts_prefix_entry *e) {
    node *x = node_of(e);
    lru_unlink(t, x);
    if (t->p.free_snap && e->snap) t->p.free_snap(e->snap);
    free(e->logits);
    t->entry_bytes -= e->bytes;
    t->n_entries--;
    x->e = (ts_prefix_entry){0};
    x->has_entry = false;
    prune(t, x);
}

static void evict_oldest(ts_prefix_tree *t, uint64_t *evicted) {
    ts_prefix_tree_remove(t, &t->oldest->e);
    ++*evicted;
}

/* ---- insertion ------------------------------------------------------------------------------ */

/* A new leaf for ids[d .. n) under w.at (d = its depth), or NULL when out of memory. */
static node *add_leaf(ts_prefix_tree *t, place w, const int32_t *ids, size_t n) {
    node *x = w.at, *leaf = node_new(t, ids + x->depth, n - x->depth, n);
    if (!leaf) return NULL;
    if (x->n_kids == x->cap_kids) {
        node **k = t_alloc(t, x->kids, (x->n_kids + 1) * sizeof *k);
        if (!k) {
            node_free(t, leaf);
            return NULL;
        }
        x->kids = k, x->cap_kids++;
        t->tree_bytes += sizeof *k;
    }
    memmove(x->kids + w.slot + 1, x->kids + w.slot, (x->n_kids - w.slot) * sizeof *x->kids);
    x->kids[w.slot] = leaf, x->n_kids++;
    leaf->parent = x;
    return leaf;
}

/* Splits w.kid's edge after w.k tokens with a new node m above it: m is where the key ends, or m
 * gets a second child, a leaf for the rest of the key. Returns the node of the key, or NULL when
 * out of memory (nothing changed). */
static node *split(ts_prefix_tree *t, place w, const int32_t *ids, size_t n) {
    node *c = w.kid;
    const size_t d = w.at->depth, k = w.k, rest = c->n_label - k;
    const bool ends = d + k == n;
    node *m = node_new(t, c->label, k, d + k);
    node *leaf = ends ? NULL : node_new(t, ids + d + k, n - d - k, n);
    int32_t *l = t_alloc(t, NULL, rest * sizeof *l);
    node **kids = t_alloc(t, NULL, (ends ? 1 : 2) * sizeof *kids);
    if (!m || (!ends && !leaf) || !l || !kids) {
        if (m) node_free(t, m);
        if (leaf) node_free(t, leaf);
        free(l), free(kids);
        return NULL;
    }
    memcpy(l, c->label + k, rest * sizeof *l);
    free(c->label);
    c->label = l, c->n_label = rest;
    t->tree_bytes -= k * sizeof *l;
    m->kids = kids, m->n_kids = m->cap_kids = ends ? 1 : 2;
    t->tree_bytes += m->cap_kids * sizeof *kids;
    m->parent = w.at, w.at->kids[w.slot] = m;
    c->parent = m;
    if (ends) {
        kids[0] = c;
        return m;
    }
    leaf->parent = m;
    const bool leaf_first = leaf->label[0] < c->label[0];
    kids[0] = leaf_first ? leaf : c, kids[1] = leaf_first ? c : leaf;
    return leaf;
}

/* Evicts the entries less recently used than x, oldest first, until `add` more bytes fit: whether
 * they do. */
static bool make_room(ts_prefix_tree *t, const node *x, size_t add, uint64_t *evicted) {
    while (!fits(t, add) && t->oldest != x) evict_oldest(t, evicted);
    return fits(t, add);
}

int ts_prefix_tree_add_logits(ts_prefix_tree *t, ts_prefix_entry *e, const float *logits, uint64_t *evicted) {
    *evicted = 0;
    if (e->logits) return 0;
    const size_t add = t->p.n_logits * sizeof *e->logits;
    float *l = t_alloc(t, NULL, add);
    if (!l) return -1;
    if (!make_room(t, node_of(e), add, evicted)) {
        free(l);
        return -1;
    }
    memcpy(l, logits, add);
    e->logits = l, e->bytes += add;
    t->entry_bytes += add;
    return 0;
}

int ts_prefix_tree_set_snap_bytes(ts_prefix_tree *t, ts_prefix_entry *e, size_t snap_bytes,
                                  uint64_t *evicted) {
    *evicted = 0;
    const size_t old = e->bytes - (e->logits ? t->p.n_logits * sizeof *e->logits : 0);
    if (snap_bytes > old) {
        const size_t add = snap_bytes - old;
        if (!make_room(t, node_of(e), add, evicted)) return -1;
    }
    t->entry_bytes = t->entry_bytes - old + snap_bytes;
    e->bytes = e->bytes - old + snap_bytes;
    return 0;
}

ts_prefix_entry *ts_prefix_tree_newer(ts_prefix_tree *t, ts_prefix_entry *e) {
    node *x = e ? node_of(e)->newer : t->oldest;
    return x ? &x->e : NULL;
}

int ts_prefix_tree_put(ts_prefix_tree *t, const int32_t *ids, size_t n, void *snap, size_t snap_bytes,
                       const float *logits, uint64_t *evicted) {
    *evicted = 0;
    ts_prefix_entry *old = n ? ts_prefix_tree_get(t, ids, n) : NULL;
    const size_t row = t->p.n_logits * sizeof *logits;
    /* what it costs alone, in an empty tree: its bytes, a node and its label */
    const size_t alone = ts_prefix_tree_node_bytes() + n * sizeof *ids + (logits ? row : 0);
    float *l = NULL;
    node *x = NULL;
    if (old) {
        if (t->p.free_snap && snap) t->p.free_snap(snap);
        ts_prefix_tree_touch(t, old);
        return logits ? ts_prefix_tree_add_logits(t, old, logits, evicted) : 0;
    }
    if (n == 0 || snap_bytes > t->p.budget || alone > t->p.budget - snap_bytes) goto refuse;
    const size_t bytes = snap_bytes + (logits ? row : 0);
    if (logits && !(l = t_alloc(t, NULL, row))) goto refuse;
    while (t->n_entries > 0 && !fits(t, bytes + insert_cost(t, ids, n))) evict_oldest(t, evicted);
    place w = walk(t, ids, n);
    x = w.kid ? split(t, w, ids, n) : w.at->depth == n ? w.at : add_leaf(t, w, ids, n);
    if (!x) goto refuse;
    if (l) memcpy(l, logits, row);
    x->e = (ts_prefix_entry){.snap = snap, .logits = l, .n = n, .bytes = bytes};
    x->has_entry = true;
    lru_push(t, x);
    t->n_entries++;
    t->entry_bytes += bytes;
    return 0;
refuse:
    free(l);
    if (t->p.free_snap && snap) t->p.free_snap(snap);
    return -1;
}

/* ---- life cycle and checks ------------------------------------------------------------------ */

int ts_prefix_tree_new(const ts_prefix_tree_params *p, ts_prefix_tree **out) {
    *out = NULL;
    ts_prefix_tree *t = calloc(1, sizeof *t);
    if (!t) return -1;
    t->p = *p;
    *out = t;
    return 0;
}

void ts_prefix_tree_free(ts_prefix_tree *t) {
    if (!t) return;
    node *x = &t->root; /* depth first through the parent links: no recursion, no stack */
    for (;;) {
        if (x->n_kids) {
            x = x->kids[--x->n_kids];
            continue;
        }
        node *p = x->parent;
        if (x->has_entry) {
            if (t->p.free_snap && x->e.snap) t->p.free_snap(x->e.snap);
            free(x->e.logits);
        }
        free(x->label), free(x->kids);
        if (x == &t->root) break;
        free(x);
        x = p;
    }
    free(t);
}

int ts_prefix_tree_check(const ts_prefix_tree *t, size_t *unmerged, char *err, size_t errlen) {
    size_t tree = 0, entries = 0, entry_bytes = 0;
    *unmerged = 0;
    const node *x = &t->root, *from = NULL; /* from: the child just finished */
    if (t->root.has_entry || t->root.n_label)
        return snprintf(err, errlen, "the root has an entry or a label"), -1;
    for (;;) {
        size_t i = 0;
        if (from) {
            bool found;
            i = kid_slot(x, from->label[0], &found) + 1;
            if (!found || x->kids[i - 1] != from)
                return snprintf(err, errlen, "a child is not where its first token says"), -1;
        } else { /* first visit of x */
            if (x != &t->root) {
                tree += sizeof *x + x->n_label * sizeof *x->label;
                if (x->n_label == 0 || x->depth != x->parent->depth + x->n_label)
                    return snprintf(err, errlen, "a node at depth %zu has a bad label or depth", x->depth),
                           -1;
                if (!x->has_entry && x->n_kids == 0)
                    return snprintf(err, errlen, "a leaf at depth %zu holds no entry", x->depth), -1;
                if (!x->has_entry && x->n_kids == 1) ++*unmerged;
            }
            tree += x->cap_kids * sizeof *x->kids;
            if (x->n_kids > x->cap_kids || (x->cap_kids && !x->kids))
                return snprintf(err, errlen, "a child array is smaller than its children"), -1;
            for (size_t k = 0; k < x->n_kids; k++) {
                if (x->kids[k]->parent != x)
                    return snprintf(err, errlen, "a child at depth %zu names another parent", x->depth), -1;
                if (k > 0 && !(x->kids[k - 1]->label[0] < x->kids[k]->label[0]))
                    return snprintf(err, errlen, "children at depth %zu out of order", x->depth), -1;
            }
            if (x->has_entry) {
                entries++, entry_bytes += x->e.bytes;
                if (x->e.n != x->depth)
                    return snprintf(err, errlen, "an entry of %zu tokens at depth %zu", x->e.n, x->depth), -1;
            }
        }
        if (i < x->n_kids) {
            x = x->kids[i], from = NULL;
            continue;
        }
        if (x == &t->root) break;
        from = x, x = x->parent;
    }
    size_t listed = 0;
    for (const node *y = t->newest; y; y = y->older, listed++) {
        if (!y->has_entry || (y->older ? y->older->newer != y : t->oldest != y))
            return snprintf(err, errlen, "the LRU list is broken at its entry %zu", listed), -1;
        if (listed > entries) break;
    }
    if (t->newest && t->newest->newer) return snprintf(err, errlen, "the LRU list's head has a newer"), -1;
    if (listed != entries || entries != t->n_entries)
        return snprintf(err, errlen, "%zu entries in the tree, %zu listed, %zu counted", entries, listed,
                        t->n_entries),
               -1;
    if (entry_bytes != t->entry_bytes || tree != t->tree_bytes)
        return snprintf(err, errlen, "bytes: entries %zu (counted %zu), tree %zu (counted %zu)", entry_bytes,
                        t->entry_bytes, tree, t->tree_bytes),
               -1;
    if (ts_prefix_tree_bytes(t) > t->p.budget)
        return snprintf(err, errlen, "%zu bytes held over a budget of %zu", ts_prefix_tree_bytes(t),
                        t->p.budget),
               -1;
    return 0;
}
