/* A radix tree of token prefixes: the store of the server's prefix cache (sched.c).
 *
 * A key is a sequence of token ids (at least one); an entry kept under it holds an opaque snapshot
 * of a sequence's state after those tokens, optionally the logits row of the last of them, and its
 * byte count. The tree is compressed: an edge carries a run of tokens, and a node exists only where
 * a key ends or where keys part ways, so a token shared by many keys is stored once.
 *
 *   find    the entry of the longest key that is a prefix of a prompt: one walk down one path,
 *           O(n) token comparisons for a prompt of n tokens plus, at each node on the way, a binary
 *           search among its children (sorted by the first token of their edge);
 *   put     insert: splits the edge where the key ends or parts inside it;
 *   remove  drop an entry: a node left with neither entry nor child goes, one left with no entry
 *           and a single child merges into that child, so the tree stays compressed;
 *   touch   LRU order: the entries are on a doubly linked list, most recently used first; an
 *           eviction takes the last one. O(1) both.
 *
 * Budget: ts_prefix_tree_bytes() is the entries' bytes (each snapshot's bytes as the caller states
 * them, plus its logits row) and the tree's own memory: ts_prefix_tree_node_bytes() a node (its
 * struct and its pointer in its parent's child array) and 4 bytes a token of its edge. A tree of
 * keys K with no failed allocation behind it therefore holds |nodes(K)| · node_bytes + 4 · (distinct
 * non-empty prefixes of K) bytes of its own. Not counted: the ts_prefix_tree struct (which embeds
 * the root) and malloc's per-block overhead (16 bytes or so a block, three blocks a node). put and
 * add_logits evict least recently used entries until what they add fits; the total never exceeds
 * the budget.
 *
 * Allocation failures leave the tree as it was (put and add_logits then return −1; entries they
 * evicted first stay evicted), except in removal, which never fails: a merge whose allocation fails
 * is skipped, leaving a node with no entry and one child — correct, one node less compact.
 *
 * Ownership: from put on, the tree owns the snapshot it is given (even when put refuses it) and
 * gives it back through params.free_snap when its entry is evicted, removed or refused, or with the
 * tree; it copies logits rows. An entry pointer stays valid until that entry is removed, which any
 * put or add_logits may do by eviction. One thread uses a tree (no lock inside). */
#ifndef TS_SERVER_PREFIX_TREE_H
#define TS_SERVER_PREFIX_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_prefix_entry {
    void *snap;    /* the state after the key's tokens (owned; opaque to the tree) */
    float *logits; /* [n_logits] after the key's last token, or NULL (owned) */
    size_t n;      /* tokens of the key: the prompt restored from it skips this many */
    size_t bytes;  /* the snapshot's stated bytes + 4 · n_logits with logits */
} ts_prefix_entry;

typedef struct ts_prefix_tree_params {
    size_t budget;                 /* bytes the tree may hold: entries and its own memory */
    size_t n_logits;               /* floats of a logits row */
    void (*free_snap)(void *snap); /* gives a snapshot back (NULL: nothing to do) */
    /* NULL: the C library's realloc. Tests pass one that fails on demand; every block it returns is
     * given back with free(). */
    void *(*realloc_fn)(void *p, size_t size);
} ts_prefix_tree_params;

typedef struct ts_prefix_tree ts_prefix_tree;

/* 0, or −1 when out of memory. */
int ts_prefix_tree_new(const ts_prefix_tree_params *p, ts_prefix_tree **out);
void ts_prefix_tree_free(ts_prefix_tree *t); /* with every entry */

/* The entry of the longest key that is a prefix of ids[0 .. n) and either shorter than n or with
 * logits (a whole prompt restored leaves nothing to evaluate, so its logits must come with it), or
 * NULL. The LRU order is left as it is. */
ts_prefix_entry *ts_prefix_tree_find(ts_prefix_tree *t, const int32_t *ids, size_t n);
/* The entry kept under exactly ids[0 .. n), or NULL. */
ts_prefix_entry *ts_prefix_tree_get(ts_prefix_tree *t, const int32_t *ids, size_t n);
/* e becomes the most recently used entry. */
void ts_prefix_tree_touch(ts_prefix_tree *t, ts_prefix_entry *e);

/* Keeps snap (stated to be snap_bytes) and a copy of logits (NULL: none) under ids[0 .. n) as the
 * most recently used entry, evicting least recently used ones until it fits (*evicted: how many).
 * A key already kept keeps its snapshot (snap is given back), becomes the most recently used, and
 * gets the logits when it had none (ts_prefix_tree_add_logits, whose result is returned). 0, or −1
 * when refused: an empty key, an entry larger than the whole budget (nothing evicted), or out of
 * memory. */
int ts_prefix_tree_put(ts_prefix_tree *t, const int32_t *ids, size_t n, void *snap, size_t snap_bytes,
                       const float *logits, uint64_t *evicted);
/* Gives e a copy of logits when it has none, evicting the entries less recently used than e, oldest
 * first, until it fits (*evicted: how many). 0 (also when e had logits), or −1 when it cannot fit or out of memory. */
int ts_prefix_tree_add_logits(ts_prefix_tree *t, ts_prefix_entry *e, const float *logits, uint64_t *evicted);
/* e's snapshot now counts snap_bytes (its logits aside): a snapshot moved between memories, e.g.
 * out of GPU memory into host memory that the budget counts. Growing evicts the entries less
 * recently used than e, oldest first, until it fits (*evicted: how many); −1 when it cannot fit even
 * then (e unchanged: the caller decides, typically removing it, which is what LRU order asks). */
int ts_prefix_tree_set_snap_bytes(ts_prefix_tree *t, ts_prefix_entry *e, size_t snap_bytes,
                                  uint64_t *evicted);
/* The LRU order, oldest first: the entry used next after e (e NULL: the least recently used
 * entry), or NULL after the most recently used one. */
ts_prefix_entry *ts_prefix_tree_newer(ts_prefix_tree *t, ts_prefix_entry *e);
/* Drops e (its snapshot is given back) and prunes what only it needed. */
void ts_prefix_tree_remove(ts_prefix_tree *t, ts_prefix_entry *e);

size_t ts_prefix_tree_bytes(const ts_prefix_tree *t);   /* what the budget counts, now */
size_t ts_prefix_tree_entries(const ts_prefix_tree *t); /* entries kept */
size_t ts_prefix_tree_node_bytes(void);                 /* what one node costs, its label aside */

/* For tests: walks the whole tree and checks children sorted by distinct first tokens, parents and
 * depths, non-empty labels, every node but the root holding an entry or at least two children
 * (*unmerged: how many hold neither, left by failed merges), the LRU list holding exactly the
 * entries, and the byte and entry counts against a recount. 0, or −1 with a sentence in err. */
int ts_prefix_tree_check(const ts_prefix_tree *t, size_t *unmerged, char *err, size_t errlen);

#endif
