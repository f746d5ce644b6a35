/* JSON schemas (and tool calls) compiled to byte grammars (grammar.h) for constrained decoding.
 *
 * What a schema may say (the common subset that OpenAI's strict mode and llama.cpp also cover):
 *   type (a name or a list of names: object, array, string, number, integer, boolean, null),
 *   properties, required, additionalProperties (false, or absent: only the listed properties are
 *   written), items, minItems, maxItems, minLength, maxLength, enum, const, anyOf, oneOf (as
 *   anyOf), and the annotations title, description, default, examples, $schema, $id, $comment,
 *   strict. {} (or true) is any JSON value; an object without properties has any members.
 * Every other keyword (pattern, format, minimum, $ref, allOf, ...) is refused with its name and
 * where it is, never ignored: output that ignored it could fail the caller's validation.
 *
 * The output: properties in the schema's order, required ones always, optional ones maybe;
 * whitespace between tokens limited to a space or a newline and up to 20 blanks of indent
 * (so the model cannot fill its budget with blanks); integers of at most 16 digits, fractions of
 * at most 16, exponents of 3; strings of any bytes but '"', '\' and controls, or escapes (minLength /
 * maxLength count UTF-8 characters). Up to 4 blanks may come before the value. */
#ifndef TS_ENGINE_JSON_SCHEMA_H
#define TS_ENGINE_JSON_SCHEMA_H

#include "engine/grammar.h"

#include <stdbool.h>
#include <stddef.h>

/* A grammar of the values the schema (JSON text) allows; NULL schema: any JSON object
 * (response_format json_object). 0 with *out, or −1 with a sentence. */
int ts_json_schema_grammar(const char *schema, ts_grammar **out, char *err, size_t errlen);

/* A grammar of Qwen tool calls, "<tool_call>\n{\"name\": \"NAME\", \"arguments\": ARGS}\n</tool_call>",
 * one at least and up to 8 separated by a newline (only one unless parallel), for every tool of
 * tools_json (the request's "tools" array) or only the one called `only` (non-NULL). ARGS follow
 * the tool's parameters schema. 0 with *out, or −1 with a sentence naming the tool. */
int ts_tool_call_grammar(const char *tools_json, const char *only, bool parallel, ts_grammar **out, char *err,
                         size_t errlen);

#endif
