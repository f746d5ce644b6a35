/* JSON text checked before cJSON reads it.
 *
 * cJSON (1.7) decodes a JSON string into a NUL-terminated C string, so everything that reads
 * `valuestring` stops at the escape \u0000 and silently loses the rest ("abc\u0000def" reads
 * "abc"; a key "stream\u0000x" reads "stream"). It also reads a \u escape whose four characters
 * are not all hex digits as \u0000, and copies a string's raw bytes without a UTF-8 check.
 * ts_json_check scans the text once, allocating nothing, and reports the first string, value or
 * key, that would be read wrongly or that is not Unicode text:
 *   TS_JSON_NUL         it holds \u0000 or a raw NUL byte (a string the caller carries may: below);
 *   TS_JSON_BAD_ESCAPE  a \u not followed by four hex digits, or a backslash before anything but
 *                       " \ / b f n r t u (not JSON: cJSON refuses the latter itself);
 *   TS_JSON_SURROGATE   a lone surrogate escape (\ud800 not followed by \udc00-\udfff, or
 *                       \udc00-\udfff alone): no Unicode character (cJSON refuses the whole text);
 *   TS_JSON_BAD_UTF8    raw bytes that are not well-formed UTF-8 (Unicode's Table 3-7: no overlong
 *                       forms such as C0 80, no encoded surrogates, nothing past U+10FFFF, no cut
 *                       sequence); JSON text is UTF-8 (RFC 8259 §8.1).
 * Paths name a string as OpenAI's errors do: "messages[2].content", "tools[0].function.name"; the
 * root is ""; a key that is empty or holds '.', '[', ']', '"' or a control character is written
 * ["k.e[y"], so it cannot pass for a path of plain names. Paths longer than the buffer end in "...".
 *
 * A caller that takes a string with its length lists the string's path in `carry`: that string may
 * hold \u0000, and the check hands back the raw token of the first string value at that path — the
 * one cJSON_GetObjectItemCaseSensitive finds, since it takes the first of equal keys — which
 * ts_json_decode turns into its bytes, NUL and all.
 *
 * The text need not be valid JSON otherwise: the scan follows quotes, brackets, braces, commas and
 * colons and leaves every other error (and nesting past 1,000 levels, cJSON's limit) to cJSON. */
#ifndef TS_COMMON_JSON_CHECK_H
#define TS_COMMON_JSON_CHECK_H

#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum ts_json_issue_kind {
    TS_JSON_OK = 0,
    TS_JSON_NUL,
    TS_JSON_BAD_ESCAPE,
    TS_JSON_SURROGATE,
    TS_JSON_BAD_UTF8,
} ts_json_issue_kind;

typedef struct ts_json_issue {
    ts_json_issue_kind kind;
    bool in_key;    /* in a key of the object at `path` (else in the string value at `path`) */
    size_t at;      /* byte offset in the text of the escape or the first bad byte */
    char esc[8];    /* TS_JSON_SURROGATE, TS_JSON_BAD_ESCAPE: the escape as written ("\ud800") */
    char path[192]; /* as above; "" for the root */
} ts_json_issue;

typedef struct ts_json_carry {
    const char *path; /* in: a string value that may hold \u0000 ("prompt", "prompt[0]") */
    const char *tok;  /* out: its raw token, between the quotes (NULL: no string value at that path) */
    size_t n;
    bool nul; /* out: the token holds \u0000 */
} ts_json_carry;

/* 0 when every string of s[0..n) is fine (carry[] filled), else 1 with *issue (the first in the
 * text). carry may be NULL when n_carry is 0. */
int ts_json_check(const char *s, size_t n, ts_json_carry *carry, int n_carry, ts_json_issue *issue);

/* Appends the bytes a checked string token (between its quotes) stands for, NUL bytes included.
 * 0, or −1 when out of memory. */
int ts_json_decode(const char *tok, size_t n, ts_text *out);

/* One sentence about the issue, for a person: "'messages[2].content' contains a NUL character
 * (\u0000), which WHO cannot carry", "'prompt' is not valid UTF-8 (byte 12: ...)". Returns buf. */
const char *ts_json_issue_text(const ts_json_issue *is, const char *who, char *buf, size_t len);

/* For a library function that reads JSON text with cJSON and takes no NUL: 0 when text[0..n) is
 * fine, else −1 with "WHAT: <the issue's sentence>" in err. */
int ts_json_check_text(const char *what, const char *text, size_t n, const char *who, char *err,
                       size_t errlen);

#endif
