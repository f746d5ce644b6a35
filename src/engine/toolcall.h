/* Tool calls in a model's answer, parsed into (name, JSON arguments) pairs.
 *
 * Qwen models call tools with a block per call, in one of two forms (vLLM's hermes and
 * qwen3_coder parsers, llama.cpp's Qwen handlers):
 *   <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
 *   <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>
 * In the XML form a parameter's value is its text less one leading and one trailing newline; it
 * becomes a JSON string when the tool declares the parameter a string (or does not declare it and
 * the text is not JSON), else the JSON value the text holds.
 *
 * Text goes in in pieces of any size (a tag may be split anywhere); the content outside the blocks
 * comes out as it is decided, and each call when its block closes. Whitespace just before a block,
 * and at the end of a text that made calls, is not content. A block that does not parse stays in
 * the content as it was written, and so does everything when parsing is off (tool_choice none).
 * A block cut off by the end of the text is parsed all the same (a stop string may have eaten its
 * closing tag). */
#ifndef TS_ENGINE_TOOLCALL_H
#define TS_ENGINE_TOOLCALL_H

#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct ts_tool_call {
    char *name;      /* owned */
    char *arguments; /* owned: a JSON object as text */
} ts_tool_call;

typedef struct ts_toolcall_parser {
    void *tools;         /* cJSON array of the request's tools ({"type","function":{...}}), or NULL */
    bool inside;         /* in a <tool_call> block */
    ts_text hold;        /* bytes not decided yet (a possible tag, whitespace, a block's body) */
    ts_tool_call *calls; /* [n_calls] */
    int n_calls, cap;
} ts_toolcall_parser;

/* tools_json: the request's "tools" array as JSON text (borrowed for the call), or NULL. */
int ts_toolcall_init(ts_toolcall_parser *p, const char *tools_json, char *err, size_t errlen);
void ts_toolcall_free(ts_toolcall_parser *p);
/* Feeds content text; appends what is decided to be content to `content`; new calls are appended
 * to p->calls. 0 or −1 (out of memory). */
int ts_toolcall_push(ts_toolcall_parser *p, const char *s, size_t n, ts_text *content);
int ts_toolcall_finish(ts_toolcall_parser *p, ts_text *content);

/* One block's body (between the tags) parsed: 0 with *name, *arguments (malloc'd) or −1. */
int ts_toolcall_parse_body(const void *tools, const char *s, size_t n, char **name, char **arguments);

#endif
