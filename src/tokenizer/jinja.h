/* A Jinja engine for chat templates: the subset of Jinja2 that Hugging Face chat templates use,
 * rendered as transformers' apply_chat_template renders them (an immutable sandbox with
 * trim_blocks and lstrip_blocks, the loop-control extension, its own `tojson`, the globals
 * raise_exception and strftime_now).
 *
 * Supported: {{ }}, {% %}, {# #} with the '-' and '+' whitespace controls; if/elif/else; for (over
 * lists, dict keys, strings; tuple targets; an `if` filter; else; loop.index/index0/revindex/
 * revindex0/first/last/length/previtem/nextitem; break/continue); set (names and namespace
 * attributes); macro (positional, keyword and default arguments); generation blocks; literals
 * (strings, numbers, lists, tuples, dicts, true/false/none); the operators of Jinja's grammar
 * (or and not in is == != < <= > >= + - ~ * / // % **, x if c else y, [i] and [a:b:c], .attr, calls);
 * the filters, tests, string/dict methods listed in jinja_builtins.c and the globals in jinja.c. Anything
 * else (extends, include, import, call blocks, recursive loops, other filters) is refused by name at parse
 * time or when it is reached.
 *
 * Values follow Python's rules (truthiness, ==, `in`, str() and repr() of lists and dicts, float
 * repr) and Jinja2's default Undefined: printing an undefined name gives "", testing or iterating
 * it is allowed, using it in arithmetic or looking into it is an error.
 *
 * Bounds: a render may take at most TS_JINJA_MAX_STEPS loop iterations and macro calls, nest macro
 * calls TS_JINJA_MAX_DEPTH deep and allocate TS_JINJA_MAX_BYTES; the parser nests at most
 * TS_JINJA_MAX_NEST blocks or expressions. Past a bound the render (or parse) fails with a sentence,
 * so a hostile template cannot crash or hang the process. */
#ifndef TS_TOKENIZER_JINJA_H
#define TS_TOKENIZER_JINJA_H

#include "tokenizer/tokenizer.h"

#include <stddef.h>

#define TS_JINJA_MAX_STEPS 2000000L
#define TS_JINJA_MAX_DEPTH 32
#define TS_JINJA_MAX_BYTES ((size_t)256 << 20)
#define TS_JINJA_MAX_NEST 64

typedef struct ts_jinja ts_jinja; /* a parsed template; immutable, usable by several threads */

/* Parses src[0..len). Fails with a sentence naming the line and the construct. */
int ts_jinja_parse(const char *src, size_t len, ts_jinja **out, char *err, size_t errlen);
void ts_jinja_free(ts_jinja *t);

/* Renders with the members of vars (a cJSON object: messages, tools, add_generation_prompt,
 * enable_thinking, bos_token, ...) as the template's variables and APPENDS the text to out.
 * JSON numbers become ints when integral (cJSON keeps no int/float distinction), floats otherwise. */
int ts_jinja_render(const ts_jinja *t, const void *vars, ts_text *out, char *err, size_t errlen);

#endif
