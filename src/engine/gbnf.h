/* GBNF, llama.cpp's grammar text, parsed into a byte grammar (grammar.h) — the `grammar` field of
 * llama-server's requests and `--grammar-file`.
 *
 *   root   ::= "{" ws pair ("," ws pair)* "}"     # rules: name ::= alternatives; `root` starts
 *   pair   ::= [a-z]+ ws ":" ws value             # "literal", [class], [^negated], ., name, ( ... )
 *   value  ::= [0-9]{1,3} | "\"" [^"\\]* "\""     # postfix * + ? {m} {m,} {m,n}; # comments
 *   ws     ::= [ \t\n]*
 *
 * Literals take the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (as UTF-8). The grammar runs
 * on bytes: a negated class or `.` takes any byte >= 0x80 as one character, so counted repetitions
 * of them count bytes of non-ASCII text; character classes may hold ASCII only (others are refused
 * by name). Left recursion is refused. Errors name the line and what was expected. */
#ifndef TS_ENGINE_GBNF_H
#define TS_ENGINE_GBNF_H

#include "engine/grammar.h"

#include <stddef.h>

int ts_gbnf_grammar(const char *text, size_t n, ts_grammar **out, char *err, size_t errlen);

#endif
