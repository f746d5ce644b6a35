/* <think> blocks split off the answer (see reasoning.h). A small state machine over bytes; the
 * held bytes are always a run that can still become (newlines +) a tag. */
#include "engine/reasoning.h"

#include "common/error.h"

#include <string.h>

enum { BEFORE, INSIDE, AFTER };

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

int ts_reasoning_format_from_name(const char *name, ts_reasoning_format *f, char *err, size_t errlen) {
    if (name && !strcmp(name, "none")) return *f = TS_REASONING_NONE, 0;
    if (name && (!strcmp(name, "deepseek") || !strcmp(name, "auto"))) return *f = TS_REASONING_DEEPSEEK, 0;
    return ts_errf(err, errlen, "unknown reasoning format '%s': choose none or deepseek", name ? name : "");
}

void ts_think_init(ts_think_split *t, bool opened) {
    memset(t, 0, sizeof *t);
    t->state = opened ? INSIDE : BEFORE;
}

void ts_think_free(ts_think_split *t) {
    ts_text_free(&t->hold);
}

bool ts_think_inside(const ts_think_split *t) {
    return t->state == INSIDE;
}

/* Content bytes: leading newlines are dropped until the answer starts. */
static int put_content(ts_think_split *t, const char *s, size_t n, ts_text *content) {
    if (!t->answered) {
        while (n && (*s == '\n' || *s == '\r')) s++, n--;
        if (!n) return 0;
        t->answered = true;
    }
    return ts_text_append(content, s, n);
}

/* Reasoning bytes: leading newlines are dropped until the thought starts. */
static int put_reasoning(const char *s, size_t n, ts_text *reasoning) {
    if (reasoning->n == 0)
        while (n && (*s == '\n' || *s == '\r')) s++, n--;
    return n ? ts_text_append(reasoning, s, n) : 0;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag (or all of it). */
static size_t tag_prefix_tail(const char *s, size_t n, const char *tag) {
    size_t L = strlen(tag);
    for (size_t m = L - 1 < n ? L - 1 : n; m > 0; m--)
        if (!memcmp(s + n - m, tag, m)) return m;
    return 0;
}

/* Decides as much of the held bytes as possible (final: the text is over). */
static int drain(ts_think_split *t, ts_text *reasoning, ts_text *content, bool final) {
    ts_text *h = &t->hold;
    size_t used = 0; /* bytes of h decided */
    int rc = 0;
    while (used < h->n && !rc) {
        const char *s = h->s + used;
        size_t n = h->n - used;
        if (t->state == BEFORE) {
            size_t ws = 0;
            while (ws < n && (s[ws] == ' ' || s[ws] == '\n' || s[ws] == '\r' || s[ws] == '\t')) ws++;
            size_t rest = n - ws, L = sizeof OPEN - 1;
            if (rest >= L && !memcmp(s + ws, OPEN, L)) {
                t->state = INSIDE, used += ws + L;
            } else if (!final && rest < L && !memcmp(s + ws, OPEN, rest)) {
                break; /* whitespace and maybe the start of "<think>": wait */
            } else {
                t->state = AFTER; /* no block: all of it is content */
            }
        } else if (t->state == INSIDE) {
            const char *c = memmem(s, n, CLOSE, sizeof CLOSE - 1);
            size_t body = c ? (size_t)(c - s) : final ? n : n - tag_prefix_tail(s, n, CLOSE), b = body;
            if (!final || c) /* newlines before the tag are not reasoning; before a possible tag, held */
                while (b && (s[b - 1] == '\n' || s[b - 1] == '\r')) b--;
            rc = put_reasoning(s, b, reasoning);
            if (c) {
                t->state = AFTER, used += body + sizeof CLOSE - 1;
            } else {
                used += b;
                break;
            }
        } else {
            rc = put_content(t, s, n, content);
            used = h->n;
        }
    }
    if (used) {
        memmove(h->s, h->s + used, h->n - used);
        h->n -= used;
    }
    return rc;
}

int ts_think_push(ts_think_split *t, const char *s, size_t n, ts_text *reasoning, ts_text *content) {
    if (t->state == AFTER && t->hold.n == 0) return put_content(t, s, n, content);
    if (ts_text_append(&t->hold, s, n)) return -1;
    return drain(t, reasoning, content, false);
}

int ts_think_finish(ts_think_split *t, ts_text *reasoning, ts_text *content) {
    if (t->state == INSIDE) { /* trailing newlines of an unfinished thought go too */
        while (t->hold.n && (t->hold.s[t->hold.n - 1] == '\n' || t->hold.s[t->hold.n - 1] == '\r'))
            t->hold.n--;
    }
    return drain(t, reasoning, content, true);
}

bool ts_prompt_opens_think(const char *prompt, size_t n) {
    const char *open = NULL, *p = prompt;
    while (n && (p = memmem(p, n - (size_t)(p - prompt), OPEN, sizeof OPEN - 1))) open = p++;
    if (!open) return false;
    size_t after = (size_t)(open - prompt) + sizeof OPEN - 1;
    return !memmem(prompt + after, n - after, CLOSE, sizeof CLOSE - 1);
}
