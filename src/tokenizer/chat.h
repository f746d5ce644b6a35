/* Chat templates rendered in C: the ChatML family of Qwen models.
 *
 * A GGUF carries its chat template as Jinja (tokenizer.chat_template). Rather than embed a Jinja
 * engine, turbospark recognises the templates it knows by their markers and renders them here,
 * byte for byte as transformers' apply_chat_template does (tests/fixtures/chat):
 *   chatml          every message "<|im_start|>{role}\n{content}<|im_end|>\n"; generation prompt
 *                   "<|im_start|>assistant\n".
 *   qwen3           the Qwen3 template: system first (with tools: the system turn lists them in
 *                   <tools></tools>, each as transformers' `tool | tojson` writes it, and says how to
 *                   call them); assistant turns before the last
 *                   user query lose their <think> reasoning (taken from reasoning_content or split
 *                   off the content at </think>), later ones keep it as "<think>\n...\n</think>\n\n";
 *                   an assistant's tool calls follow its content as <tool_call> blocks of
 *                   {"name": ..., "arguments": ...}; consecutive "tool" messages become one user turn
 *                   of <tool_response> blocks;
 *                   the generation prompt gets an empty "<think>\n\n</think>\n\n" when
 *                   enable_thinking is false.
 *   qwen3-thinking  the same, but the generation prompt opens "<think>\n" unless enable_thinking is
 *                   false (templates of thinking models, e.g. Qwen3 "Thinking" releases).
 * Recognition: <|im_start|> and <|im_end|> must appear; a template that mentions </think> is of the
 * qwen3 kind, thinking when its generation-prompt section opens more <think> than it closes.
 * Anything else is refused with a message that names the --chat-template override; the chatml kind
 * refuses tools and tool calls (it has no way to show them). */
#ifndef TS_TOKENIZER_CHAT_H
#define TS_TOKENIZER_CHAT_H

#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum ts_chat_kind {
    TS_CHAT_JINJA = 0, /* not hand-written: a Jinja template (ts_chat_template) */
    TS_CHAT_CHATML = 1,
    TS_CHAT_QWEN3 = 2,
    TS_CHAT_QWEN3_THINKING = 3,
} ts_chat_kind;

typedef struct ts_chat_tool_call {
    const char *name;
    const char *arguments; /* JSON text, written as given (the template's `arguments is string`) */
} ts_chat_tool_call;

typedef struct ts_chat_msg {
    const char *role;              /* "system", "user", "assistant", "tool" (qwen3 kinds ignore others) */
    const char *content;           /* NULL is "" */
    const char *reasoning_content; /* assistant turns: the reasoning, or NULL when not given */
    const ts_chat_tool_call *tool_calls; /* assistant turns: [n_tool_calls] */
    size_t n_tool_calls;
} ts_chat_msg;

typedef struct ts_chat_opts {
    bool add_generation_prompt; /* end with the opening of an assistant turn */
    int enable_thinking;        /* -1: not given (the template's default), 0: false, 1: true */
    const char *const *tools;   /* [n_tools] each tool as `tool | tojson` writes it (ts_chat_tojson) */
    size_t n_tools;
    const char *kwargs_json; /* chat_template_kwargs: a JSON object of more variables for a Jinja
                                   template, or NULL (the hand-written kinds read enable_thinking only) */
} ts_chat_opts;

const char *ts_chat_kind_name(ts_chat_kind k);
/* "chatml", "qwen3", "qwen3-thinking" (the --chat-template values). */
int ts_chat_kind_from_name(const char *name, ts_chat_kind *k, char *err, size_t errlen);
/* Recognises a Jinja template (tokenizer.chat_template); fails with a sentence naming the override. */
int ts_chat_detect(const char *jinja, ts_chat_kind *k, char *err, size_t errlen);
/* The override when given (non-NULL, non-empty), else the detected kind of jinja (may be NULL:
 * the file has no template). */
int ts_chat_select(const char *override_name, const char *jinja, ts_chat_kind *k, char *err, size_t errlen);
/* Renders the conversation and APPENDS the prompt text to out. */
int ts_chat_render(ts_chat_kind kind, const ts_chat_msg *msgs, size_t n, const ts_chat_opts *o, ts_text *out,
                   char *err, size_t errlen);

/* ---- the template a model's chats use ---------------------------------------------------------
 * The file's own Jinja template (tokenizer.chat_template, or --chat-template-file) rendered by the
 * Jinja engine (jinja.h), or a hand-written kind above. Choice, in order:
 *   1. a kind asked for by name (--chat-template chatml|qwen3|qwen3-thinking);
 *   2. with Jinja on (the default; --no-jinja turns it off), the --chat-template-file or else the
 *      file's template, when it parses and renders a one-message conversation; a template file
 *      that does not is an error, the file's own template falls back to 3 with a note;
 *   3. the hand-written kind recognised from that template (ts_chat_detect). */
typedef struct ts_chat_template {
    ts_chat_kind kind; /* the hand-written kind, or TS_CHAT_JINJA */
    ts_jinja *jinja;   /* TS_CHAT_JINJA: the parsed template */
} ts_chat_template;

/* name: --chat-template or NULL; file: --chat-template-file or NULL; gguf_template: the model's
 * tokenizer.chat_template or NULL. note (may be NULL) receives a sentence worth logging when the
 * file's template was set aside, else "". */
int ts_chat_template_choose(ts_chat_template *t, const char *name, const char *file,
                            const char *gguf_template, bool use_jinja, char *note, size_t notelen, char *err,
                            size_t errlen);
void ts_chat_template_free(ts_chat_template *t);
/* "jinja" or the hand-written kind's name. */
const char *ts_chat_template_name(const ts_chat_template *t);
/* Renders the conversation and APPENDS the prompt to out (as ts_chat_render). For Jinja, the
 * variables are messages (role, content, reasoning_content, tool_calls with each call's arguments
 * as a JSON object when they parse as one: the Qwen3.5 and Coder templates iterate over them),
 * tools (null when none), add_generation_prompt, enable_thinking when given, and the members of
 * kwargs_json. */
int ts_chat_template_render(const ts_chat_template *t, const ts_chat_msg *msgs, size_t n,
                            const ts_chat_opts *o, ts_text *out, char *err, size_t errlen);

/* Appends a JSON value (a cJSON *) as Python's json.dumps(ensure_ascii=False) writes it, which is
 * what transformers' `tojson` filter gives: ", " and ": " separators, keys in their order. 0 or −1. */
int ts_chat_tojson(const void *cjson, ts_text *out);

#endif
