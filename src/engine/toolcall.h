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

/* ts_tool_call, ts_toolcall_parser and their functions: include/turbospark.h. */

/* One block's body (between the tags) parsed: 0 with *name, *arguments (malloc'd) or −1. */
int ts_toolcall_parse_body(const void *tools, const char *s, size_t n, char **name, char **arguments);

#endif
