/* Byte grammars, parse-stack sets and token masks (see grammar.h). */
#include "engine/grammar.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

enum { EL_END = 0, EL_ALT = 1, EL_CLS = 2, EL_REF = 3 };
#define EL(kind, arg) (((uint32_t)(kind) << 30) | (uint32_t)(arg))
#define KIND(e) ((e) >> 30)
#define ARG(e) ((e)&0x3fffffffu)
#define SET_CAP 8192    /* int32s of one stack set: [len, positions...] per stack */
#define MAX_EXPAND 1024 /* nested expansions of one closure (a guard; finish refuses left recursion) */

typedef struct alt_list {
    uint32_t **seq;
    int *n;
    int count, cap;
} alt_list;

struct ts_grammar {
    alt_list *rules; /* building: each rule's alternatives */
    int n_rules, cap_rules;
    uint64_t (*cls)[4];
    int n_cls, cap_cls;
    /* frozen: alternatives back to back, each ended by EL_ALT, a rule's last by EL_END */
    uint32_t *el;
    int32_t *alt_pos, *alt_off; /* alternatives of rule r: alt_pos[alt_off[r] .. alt_off[r + 1]) */
    int root;
    bool frozen;
};

/* ---- building ------------------------------------------------------------------------------- */

ts_grammar *ts_grammar_new(void) {
    return calloc(1, sizeof(ts_grammar));
}

void ts_grammar_free(ts_grammar *g) {
    if (!g) return;
    for (int r = 0; r < g->n_rules; r++) {
        for (int a = 0; a < g->rules[r].count; a++) free(g->rules[r].seq[a]);
        free(g->rules[r].seq), free(g->rules[r].n);
    }
    free(g->rules), free(g->cls), free(g->el), free(g->alt_pos), free(g->alt_off), free(g);
}

int ts_grammar_rule(ts_grammar *g) {
    if (g->n_rules >= TS_GRAMMAR_MAX_RULES) return -1;
    if (g->n_rules == g->cap_rules) {
        int cap = g->cap_rules ? 2 * g->cap_rules : 64;
        alt_list *r = realloc(g->rules, (size_t)cap * sizeof *r);
        if (!r) return -1;
        g->rules = r, g->cap_rules = cap;
    }
    memset(&g->rules[g->n_rules], 0, sizeof *g->rules);
    return g->n_rules++;
}

int ts_grammar_n_rules(const ts_grammar *g) {
    return g->n_rules;
}

int ts_grammar_class(ts_grammar *g, const uint64_t bits[4]) {
    for (int i = 0; i < g->n_cls; i++)
        if (!memcmp(g->cls[i], bits, sizeof g->cls[i])) return i;
    if (g->n_cls == g->cap_cls) {
        int cap = g->cap_cls ? 2 * g->cap_cls : 32;
        uint64_t(*c)[4] = realloc(g->cls, (size_t)cap * sizeof *c);
        if (!c) return -1;
        g->cls = c, g->cap_cls = cap;
    }
    memcpy(g->cls[g->n_cls], bits, sizeof g->cls[0]);
    return g->n_cls++;
}

int ts_grammar_range(ts_grammar *g, int lo, int hi) {
    uint64_t b[4] = {0};
    for (int i = lo; i <= hi; i++) b[i >> 6] |= 1ull << (i & 63);
    return ts_grammar_class(g, b);
}

static void seq_push(ts_gseq *s, uint32_t x) {
    if (s->oom) return;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        uint32_t *p = realloc(s->sym, (size_t)cap * sizeof *p);
        if (!p) {
            s->oom = true;
            return;
        }
        s->sym = p, s->cap = cap;
    }
    s->sym[s->n++] = x;
}

void ts_gseq_class(ts_gseq *s, int cls) {
    if (cls < 0)
        s->oom = true;
    else
        seq_push(s, EL(EL_CLS, cls));
}

void ts_gseq_ref(ts_gseq *s, int rule) {
    if (rule < 0)
        s->oom = true;
    else
        seq_push(s, EL(EL_REF, rule));
}

void ts_gseq_lit(ts_grammar *g, ts_gseq *s, const char *text, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        ts_gseq_class(s, ts_grammar_range(g, c, c));
    }
}

void ts_gseq_free(ts_gseq *s) {
    free(s->sym);
    memset(s, 0, sizeof *s);
}

int ts_grammar_alt(ts_grammar *g, int rule, ts_gseq *s) {
    alt_list *r = rule >= 0 && rule < g->n_rules ? &g->rules[rule] : NULL;
    uint32_t *copy = r && !s->oom ? malloc(((size_t)s->n + 1) * sizeof *copy) : NULL;
    int rc = -1;
    if (copy && r->count == r->cap) {
        int cap = r->cap ? 2 * r->cap : 4;
        uint32_t **q = realloc(r->seq, (size_t)cap * sizeof *q);
        int *qn = q ? realloc(r->n, (size_t)cap * sizeof *qn) : NULL;
        if (q) r->seq = q;
        if (qn) r->n = qn, r->cap = cap;
    }
    if (copy && r->count < r->cap) {
        if (s->n) memcpy(copy, s->sym, (size_t)s->n * sizeof *copy);
        r->seq[r->count] = copy, r->n[r->count++] = s->n;
        copy = NULL, rc = 0;
    }
    free(copy);
    s->n = 0, s->oom = false;
    return rc;
}

/* Left recursion: whether a rule can reach itself before reading a byte. First the rules that can
 * match nothing (a worklist over alternatives: an alternative is nullable when all its elements are
 * nullable references), then Kahn's algorithm on the "starts with" graph: the graph has a cycle iff
 * some rule is never freed. Both are linear in the grammar's size and use no recursion, so a
 * hostile grammar can neither loop them nor overflow the stack. 0, 1 (a cycle) or −1 (out of memory). */
static int left_recursive(const ts_grammar *g) {
    int R = g->n_rules, n_alt = 0, n_ref = 0;
    for (int r = 0; r < R; r++)
        for (int a = 0; a < g->rules[r].count; a++, n_alt++)
            for (int i = 0; i < g->rules[r].n[a]; i++) n_ref += KIND(g->rules[r].seq[a][i]) == EL_REF;
    bool *nullable = calloc((size_t)R, sizeof *nullable);
    int *left = malloc(((size_t)n_alt + 1) * sizeof *left),
        *owner = malloc(((size_t)n_alt + 1) * sizeof *owner);
    int *occ_off = calloc((size_t)R + 1, sizeof *occ_off), *occ = malloc(((size_t)n_ref + 1) * sizeof *occ);
    int *queue = malloc(((size_t)R + 1) * sizeof *queue), *indeg = calloc((size_t)R, sizeof *indeg);
    int *edge_off = calloc((size_t)R + 1, sizeof *edge_off),
        *edge = malloc(((size_t)n_ref + 1) * sizeof *edge);
    int rc = -1;
    if (!nullable || !left || !owner || !occ_off || !occ || !queue || !indeg || !edge_off || !edge) goto done;
    int k = 0, qh = 0, qt = 0;
    for (int r = 0; r < R; r++) /* occurrences of each rule as a reference, in alternatives */
        for (int a = 0; a < g->rules[r].count; a++)
            for (int i = 0; i < g->rules[r].n[a]; i++)
                if (KIND(g->rules[r].seq[a][i]) == EL_REF) occ_off[ARG(g->rules[r].seq[a][i]) + 1]++;
    for (int r = 0; r < R; r++) occ_off[r + 1] += occ_off[r];
    for (int r = 0; r < R; r++)
        for (int a = 0; a < g->rules[r].count; a++, k++) {
            owner[k] = r, left[k] = 0;
            for (int i = 0; i < g->rules[r].n[a]; i++) {
                uint32_t e = g->rules[r].seq[a][i];
                if (KIND(e) == EL_REF)
                    left[k]++, occ[occ_off[ARG(e)] + indeg[ARG(e)]++] = k;
                else
                    left[k] = -(1 << 30); /* a byte class: never nullable */
            }
            if (left[k] == 0 && !nullable[r]) nullable[r] = true, queue[qt++] = r;
        }
    while (qh < qt) {
        int x = queue[qh++];
        for (int j = occ_off[x]; j < occ_off[x + 1]; j++)
            if (--left[occ[j]] == 0 && !nullable[owner[occ[j]]])
                nullable[owner[occ[j]]] = true, queue[qt++] = owner[occ[j]];
    }
    memset(indeg, 0, (size_t)R * sizeof *indeg);
    for (int r = 0; r < R; r++) { /* r -> x when x can start r */
        edge_off[r + 1] = edge_off[r];
        for (int a = 0; a < g->rules[r].count; a++)
            for (int i = 0; i < g->rules[r].n[a]; i++) {
                uint32_t e = g->rules[r].seq[a][i];
                if (KIND(e) != EL_REF) break;
                edge[edge_off[r + 1]++] = (int)ARG(e), indeg[ARG(e)]++;
                if (!nullable[ARG(e)]) break;
            }
    }
    qh = qt = 0;
    for (int r = 0; r < R; r++)
        if (!indeg[r]) queue[qt++] = r;
    while (qh < qt) {
        int x = queue[qh++];
        for (int j = edge_off[x]; j < edge_off[x + 1]; j++)
            if (--indeg[edge[j]] == 0) queue[qt++] = edge[j];
    }
    rc = qt < R;
done:
    free(nullable), free(left), free(owner), free(occ_off), free(occ), free(queue), free(indeg),
        free(edge_off), free(edge);
    return rc;
}

int ts_grammar_finish(ts_grammar *g, int root, char *err, size_t errlen) {
    size_t n_el = 0, n_alt = 0;
    if (root < 0 || root >= g->n_rules) return ts_errf(err, errlen, "the grammar has no start rule");
    for (int r = 0; r < g->n_rules; r++) {
        if (!g->rules[r].count) return ts_errf(err, errlen, "grammar rule %d has no alternatives", r);
        for (int a = 0; a < g->rules[r].count; a++) {
            n_el += (size_t)g->rules[r].n[a] + 1, n_alt++;
            for (int i = 0; i < g->rules[r].n[a]; i++)
                if (KIND(g->rules[r].seq[a][i]) == EL_REF &&
                    ARG(g->rules[r].seq[a][i]) >= (uint32_t)g->n_rules)
                    return ts_errf(err, errlen, "grammar rule %d refers to a rule that does not exist", r);
        }
    }
    int lr = left_recursive(g);
    if (lr < 0) return ts_errf(err, errlen, "out of memory for a grammar");
    if (lr)
        return ts_errf(err, errlen,
                       "the grammar is left-recursive: a rule can reach itself without reading a character");
    g->el = malloc(n_el * sizeof *g->el);
    g->alt_pos = malloc(n_alt * sizeof *g->alt_pos);
    g->alt_off = malloc(((size_t)g->n_rules + 1) * sizeof *g->alt_off);
    if (!g->el || !g->alt_pos || !g->alt_off) return ts_errf(err, errlen, "out of memory for a grammar");
    size_t e = 0, k = 0;
    for (int r = 0; r < g->n_rules; r++) {
        g->alt_off[r] = (int32_t)k;
        for (int a = 0; a < g->rules[r].count; a++) {
            g->alt_pos[k++] = (int32_t)e;
            memcpy(g->el + e, g->rules[r].seq[a], (size_t)g->rules[r].n[a] * sizeof *g->el);
            e += (size_t)g->rules[r].n[a];
            g->el[e++] = a + 1 == g->rules[r].count ? EL(EL_END, 0) : EL(EL_ALT, 0);
        }
    }
    g->alt_off[g->n_rules] = (int32_t)k;
    g->root = root, g->frozen = true;
    return 0;
}

/* ---- the vocabulary ------------------------------------------------------------------------- */

typedef struct tnode {
    int32_t child, sibling, tok;
    uint8_t byte;
} tnode;

typedef struct trie {
    tnode *n;
    int32_t count, cap;
} trie;

struct ts_grammar_vocab {
    int32_t n_vocab;
    trie all, rest; /* every token with bytes; those not made only of PLAIN bytes */
    int32_t *next_tok;
    uint32_t *plain; /* bits: tokens made only of PLAIN bytes */
    int32_t *eog;    /* end-of-generation tokens */
    int n_eog, max_len;
    const char **bytes; /* [n_vocab] each token's bytes (borrowed) */
    uint32_t *len;      /* [n_vocab] */
    uint8_t *is_eog;    /* [n_vocab] */
};

static bool plain_byte(unsigned b) {
    return b >= 0x20 && b != '"' && b != '\\';
}

static int32_t trie_node(trie *t, uint8_t byte) {
    if (t->count == t->cap) {
        int32_t cap = t->cap ? 2 * t->cap : 4096;
        tnode *p = realloc(t->n, (size_t)cap * sizeof *p);
        if (!p) return -1;
        t->n = p, t->cap = cap;
    }
    t->n[t->count] = (tnode){-1, -1, -1, byte};
    return t->count++;
}

/* Inserts the token; returns its node or −1 (out of memory). */
static int32_t trie_insert(trie *t, const unsigned char *s, size_t n) {
    int32_t at = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = t->n[at].child, prev = -1;
        while (c >= 0 && t->n[c].byte != s[i]) prev = c, c = t->n[c].sibling;
        if (c < 0) {
            if ((c = trie_node(t, s[i])) < 0) return -1;
            if (prev < 0)
                t->n[at].child = c;
            else
                t->n[prev].sibling = c;
        }
        at = c;
    }
    return at;
}

int ts_grammar_vocab_from_bytes(int32_t V, const char *const *bytes, const uint32_t *len, const bool *eog,
                                ts_grammar_vocab **out, char *err, size_t errlen) {
    *out = NULL;
    ts_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return ts_errf(err, errlen, "out of memory for the grammar vocabulary");
    v->n_vocab = V;
    v->next_tok = malloc((size_t)V * sizeof *v->next_tok);
    v->plain = calloc((size_t)V / 32 + 1, sizeof *v->plain);
    v->eog = malloc((size_t)V * sizeof *v->eog);
    v->bytes = malloc((size_t)V * sizeof *v->bytes);
    v->len = malloc((size_t)V * sizeof *v->len);
    v->is_eog = malloc((size_t)V);
    bool ok = v->next_tok && v->plain && v->eog && v->bytes && v->len && v->is_eog &&
              trie_node(&v->all, 0) == 0 && trie_node(&v->rest, 0) == 0;
    for (int32_t id = 0; id < V && ok; id++) {
        const unsigned char *b = (const unsigned char *)bytes[id];
        size_t n = b ? len[id] : 0;
        v->bytes[id] = (const char *)b, v->len[id] = (uint32_t)n, v->is_eog[id] = eog[id];
        v->next_tok[id] = -1;
        if (eog[id]) {
            v->eog[v->n_eog++] = id;
            continue;
        }
        if (!n) continue;
        bool pl = true;
        for (size_t i = 0; i < n; i++) pl &= plain_byte(b[i]);
        if ((int)n > v->max_len) v->max_len = (int)n;
        int32_t node = trie_insert(&v->all, b, n);
        if (node < 0) {
            ok = false;
            break;
        }
        v->next_tok[id] = v->all.n[node].tok, v->all.n[node].tok = id; /* same bytes: one chain */
        if (pl) {
            v->plain[id >> 5] |= 1u << (id & 31);
        } else {
            int32_t r = trie_insert(&v->rest, b, n);
            if (r < 0)
                ok = false;
            else
                v->rest.n[r].tok = id;
        }
    }
    if (!ok) {
        ts_grammar_vocab_free(v);
        return ts_errf(err, errlen, "out of memory for the grammar vocabulary (%d tokens)", V);
    }
    *out = v;
    return 0;
}

int ts_grammar_vocab_new(const ts_tokenizer *tk, ts_grammar_vocab **out, char *err, size_t errlen) {
    int32_t V = ts_tokenizer_n_tokens(tk);
    const char **bytes = malloc((size_t)V * sizeof *bytes);
    uint32_t *len = malloc((size_t)V * sizeof *len);
    bool *eog = malloc((size_t)V * sizeof *eog);
    int rc = -1;
    if (bytes && len && eog) {
        for (int32_t id = 0; id < V; id++) {
            size_t n;
            bytes[id] = ts_token_bytes(tk, id, false, &n); /* the tokenizer's arena: lives as long */
            len[id] = (uint32_t)n, eog[id] = ts_tokenizer_is_eog(tk, id);
        }
        rc = ts_grammar_vocab_from_bytes(V, bytes, len, eog, out, err, errlen);
    } else {
        ts_errf(err, errlen, "out of memory for the grammar vocabulary");
    }
    free(bytes), free(len), free(eog);
    return rc;
}

void ts_grammar_vocab_free(ts_grammar_vocab *v) {
    if (!v) return;
    free(v->all.n), free(v->rest.n), free(v->next_tok), free(v->plain), free(v->eog);
    free(v->bytes), free(v->len), free(v->is_eog), free(v);
}

/* ---- stack sets ----------------------------------------------------------------------------- */

typedef struct sset {
    int32_t *d;   /* [SET_CAP]: per stack its length, then its positions bottom to top */
    int n, count; /* int32s used, stacks */
} sset;

struct ts_matcher {
    const ts_grammar *g;
    const ts_grammar_vocab *v;
    sset cur, *lvl; /* the state; scratch sets, one per trie depth */
    int n_lvl;
    bool overflow;
    int depth;      /* expand's nesting */
    bool loop[256]; /* bytes on which the current set stays itself (this mask step) */
};

static void set_add(ts_matcher *m, sset *s, const int32_t *st, int len) {
    for (int i = 0, k = 0; k < s->count; k++, i += s->d[i] + 1)
        if (s->d[i] == len && !memcmp(s->d + i + 1, st, (size_t)len * sizeof *st)) return;
    if (s->n + len + 1 > SET_CAP || s->count >= TS_GRAMMAR_MAX_STACKS) {
        m->overflow = true;
        return;
    }
    s->d[s->n] = len;
    memcpy(s->d + s->n + 1, st, (size_t)len * sizeof *st);
    s->n += len + 1, s->count++;
}

/* Adds to out every stack that st (whose top may be a reference or an end) stands for, each with a
 * byte class on top, or empty (complete). st is not modified. */
static void expand(ts_matcher *m, const int32_t *st, int len, sset *out) {
    const ts_grammar *g = m->g;
    if (++m->depth > MAX_EXPAND) {
        m->overflow = true;
        m->depth--;
        return;
    }
    while (len > 0 && KIND(g->el[st[len - 1]]) <= EL_ALT) len--; /* alternatives that are over */
    if (len == 0 || KIND(g->el[st[len - 1]]) == EL_CLS) {
        set_add(m, out, st, len);
        m->depth--;
        return;
    }
    int32_t pos = st[len - 1], tmp[TS_GRAMMAR_MAX_DEPTH + 1];
    int n = len - 1;
    memcpy(tmp, st, (size_t)n * sizeof *tmp);
    if (KIND(g->el[pos + 1]) > EL_ALT) tmp[n++] = pos + 1; /* the rest of this alternative, after the rule */
    if (n >= TS_GRAMMAR_MAX_DEPTH) {
        m->overflow = true;
        m->depth--;
        return;
    }
    int r = (int)ARG(g->el[pos]);
    for (int a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
        tmp[n] = g->alt_pos[a];
        expand(m, tmp, n + 1, out);
    }
    m->depth--;
}

static void advance(ts_matcher *m, const sset *s, unsigned char b, sset *out) {
    out->n = out->count = 0;
    int32_t tmp[TS_GRAMMAR_MAX_DEPTH + 1];
    for (int i = 0, k = 0; k < s->count; k++, i += s->d[i] + 1) {
        int len = s->d[i];
        if (!len) continue;
        int32_t top = s->d[i + len];
        const uint64_t *c = m->g->cls[ARG(m->g->el[top])];
        if (!((c[b >> 6] >> (b & 63)) & 1)) continue;
        memcpy(tmp, s->d + i + 1, (size_t)len * sizeof *tmp);
        tmp[len - 1] = top + 1;
        expand(m, tmp, len, out);
    }
}

static bool set_equal(const sset *a, const sset *b) {
    if (a->count != b->count || a->n != b->n) return false;
    for (int i = 0, k = 0; k < a->count; k++, i += a->d[i] + 1) {
        bool found = false;
        for (int j = 0, q = 0; q < b->count && !found; q++, j += b->d[j] + 1)
            found = b->d[j] == a->d[i] && !memcmp(b->d + j + 1, a->d + i + 1, (size_t)a->d[i] * sizeof *a->d);
        if (!found) return false;
    }
    return true;
}

static void set_copy(sset *dst, const sset *src) {
    memcpy(dst->d, src->d, (size_t)src->n * sizeof *dst->d);
    dst->n = src->n, dst->count = src->count;
}

/* ---- matcher -------------------------------------------------------------------------------- */

int ts_matcher_new(const ts_grammar *g, const ts_grammar_vocab *v, ts_matcher **out, char *err,
                   size_t errlen) {
    *out = NULL;
    if (!g->frozen) return ts_errf(err, errlen, "the grammar is not finished");
    ts_matcher *m = calloc(1, sizeof *m);
    if (!m) return ts_errf(err, errlen, "out of memory for a grammar state");
    m->g = g, m->v = v;
    m->n_lvl = v->max_len + 2;
    m->lvl = calloc((size_t)m->n_lvl, sizeof *m->lvl);
    m->cur.d = malloc(SET_CAP * sizeof *m->cur.d);
    bool ok = m->lvl && m->cur.d;
    for (int i = 0; ok && i < m->n_lvl; i++)
        ok = (m->lvl[i].d = malloc(SET_CAP * sizeof *m->lvl[i].d)) != NULL;
    if (!ok) {
        ts_matcher_free(m);
        return ts_errf(err, errlen, "out of memory for a grammar state (%d levels)", v->max_len + 2);
    }
    /* the start: each alternative of the root rule */
    for (int a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) {
        int32_t st = g->alt_pos[a];
        expand(m, &st, 1, &m->cur);
    }
    if (m->overflow) {
        ts_matcher_free(m);
        return ts_errf(err, errlen, "the grammar is too deep or too ambiguous at its start");
    }
    *out = m;
    return 0;
}

void ts_matcher_free(ts_matcher *m) {
    if (!m) return;
    for (int i = 0; m->lvl && i < m->n_lvl; i++) free(m->lvl[i].d);
    free(m->lvl), free(m->cur.d), free(m);
}

bool ts_matcher_can_end(const ts_matcher *m) {
    for (int i = 0, k = 0; k < m->cur.count; k++, i += m->cur.d[i] + 1)
        if (m->cur.d[i] == 0) return true;
    return false;
}

bool ts_matcher_must_end(const ts_matcher *m) {
    return m->cur.count == 1 && m->cur.d[0] == 0;
}

static void walk(ts_matcher *m, const trie *t, int32_t node, const sset *s, bool is_cur, int depth,
                 uint32_t *allow) {
    const int32_t *next = m->v->next_tok;
    for (int32_t c = t->n[node].child; c >= 0; c = t->n[c].sibling) {
        uint8_t b = t->n[c].byte;
        const sset *s2 = s;
        bool same = is_cur && m->loop[b];
        if (!same) {
            advance(m, s, b, &m->lvl[depth + 1]);
            s2 = &m->lvl[depth + 1];
            if (!s2->count) continue;
        }
        for (int32_t id = t->n[c].tok; id >= 0; id = next[id]) allow[id >> 5] |= 1u << (id & 31);
        if (t->n[c].child >= 0) walk(m, t, c, s2, same, depth + 1, allow);
    }
}

int ts_matcher_mask(ts_matcher *m, uint32_t *allow, char *err, size_t errlen) {
    const ts_grammar_vocab *v = m->v;
    size_t words = (size_t)v->n_vocab / 32 + 1;
    memset(allow, 0, words * sizeof *allow);
    bool plain_loop = true;
    for (int b = 0; b < 256; b++) {
        advance(m, &m->cur, (unsigned char)b, &m->lvl[0]);
        m->loop[b] = m->lvl[0].count && set_equal(&m->lvl[0], &m->cur);
        if (plain_byte((unsigned)b)) plain_loop &= m->loop[b];
    }
    if (plain_loop) { /* inside a free string: the plain tokens at once, the rest walked */
        memcpy(allow, v->plain, words * sizeof *allow);
        walk(m, &v->rest, 0, &m->cur, true, 0, allow);
    } else {
        walk(m, &v->all, 0, &m->cur, true, 0, allow);
    }
    if (ts_matcher_can_end(m))
        for (int i = 0; i < v->n_eog; i++) allow[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
    if (m->overflow) return ts_errf(err, errlen, "the grammar state grew past its bounds (nested too deep?)");
    return 0;
}

int ts_matcher_accept_bytes(ts_matcher *m, const char *s, size_t n, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        advance(m, &m->cur, (unsigned char)s[i], &m->lvl[0]);
        if (m->overflow)
            return ts_errf(err, errlen, "the grammar state grew past its bounds (nested too deep?)");
        if (!m->lvl[0].count)
            return ts_errf(err, errlen, "the grammar does not allow byte %zu of the text", i);
        set_copy(&m->cur, &m->lvl[0]);
    }
    return 0;
}

int ts_matcher_accept(ts_matcher *m, int32_t id, char *err, size_t errlen) {
    if (id < 0 || id >= m->v->n_vocab) return ts_errf(err, errlen, "token %d is outside the vocabulary", id);
    if (m->v->is_eog[id]) {
        if (!ts_matcher_can_end(m)) return ts_errf(err, errlen, "the grammar cannot end here");
        return 0;
    }
    if (!m->v->len[id])
        return ts_errf(err, errlen, "token %d has no text, which the grammar cannot take", id);
    return ts_matcher_accept_bytes(m, m->v->bytes[id], m->v->len[id], err, errlen);
}

bool ts_mask_allows(const uint32_t *allow, int32_t id) {
    return ts_mask_get(allow, id);
}
