/* Which chat template a model's conversations use, and rendering through it (see chat.h): the
 * file's own Jinja template by default, the hand-written kinds of chat.c as the fallback. */
#include "tokenizer/chat.h"

#include "common/error.h"
#include "common/json_check.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEMPLATE_FILE ((long)16 << 20)

static char *read_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ts_errf(err, errlen, "cannot open the chat template file '%s'", path), NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (n < 0 || n > MAX_TEMPLATE_FILE || fseek(f, 0, SEEK_SET))
        ts_errf(err, errlen, "the chat template file '%s' is not a readable file of at most %ld MiB", path,
                MAX_TEMPLATE_FILE >> 20);
    else if (!(s = malloc((size_t)n + 1)))
        ts_errf(err, errlen, "out of memory reading '%s'", path);
    else if (fread(s, 1, (size_t)n, f) != (size_t)n)
        ts_errf(err, errlen, "cannot read the chat template file '%s'", path), free(s), s = NULL;
    else
        s[n] = 0;
    fclose(f);
    return s;
}

/* Parses a template and renders a one-message conversation with it (the Qwen3.5 family refuses a
 * conversation without a user query, so that is the least every template must take). */
static int try_jinja(const char *text, ts_jinja **out, char *err, size_t errlen) {
    if (ts_jinja_parse(text, strlen(text), out, err, errlen)) return -1;
    ts_chat_template t = {.kind = TS_CHAT_JINJA, .jinja = *out};
    ts_chat_msg hello = {.role = "user", .content = "Hello"};
    ts_chat_opts o = {.add_generation_prompt = true, .enable_thinking = -1};
    ts_text probe = {0};
    int rc = ts_chat_template_render(&t, &hello, 1, &o, &probe, err, errlen);
    ts_text_free(&probe);
    if (rc) ts_jinja_free(*out), *out = NULL;
    return rc;
}

int ts_chat_template_choose(ts_chat_template *t, const char *name, const char *file,
                            const char *gguf_template, bool use_jinja, char *note, size_t notelen, char *err,
                            size_t errlen) {
    *t = (ts_chat_template){0};
    if (note && notelen) note[0] = 0;
    if (name && *name) return ts_chat_kind_from_name(name, &t->kind, err, errlen);
    char *file_text = NULL;
    if (file && !(file_text = read_file(file, err, errlen))) return -1;
    const char *text = file_text ? file_text : gguf_template;
    int rc = 0;
    char why[512];
    if (text && use_jinja && try_jinja(text, &t->jinja, why, sizeof why) == 0) {
        t->kind = TS_CHAT_JINJA;
    } else if (text && use_jinja && file_text) {
        rc = ts_errf(err, errlen, "--chat-template-file %s: %s", file, why);
    } else {
        rc = ts_chat_detect(text, &t->kind, err, errlen);
        if (!rc && text && use_jinja && note)
            snprintf(
                note, notelen,
                "the model's chat template cannot be rendered by the Jinja engine (%s); using the built-in "
                "%s rendering instead",
                why, ts_chat_kind_name(t->kind));
        if (rc && text && use_jinja) {
            char detect[512];
            snprintf(detect, sizeof detect, "%s", err);
            rc = ts_errf(err, errlen, "%s; nor can the Jinja engine render it: %s", detect, why);
        }
    }
    free(file_text);
    return rc;
}

void ts_chat_template_free(ts_chat_template *t) {
    ts_jinja_free(t->jinja);
    *t = (ts_chat_template){0};
}

const char *ts_chat_template_name(const ts_chat_template *t) {
    return t->kind == TS_CHAT_JINJA ? "jinja" : ts_chat_kind_name(t->kind);
}

/* A tool call as templates expect it: {"type": "function", "function": {"name", "arguments"}} with
 * the arguments as a JSON object when they parse as one, else the text as given. */
static cJSON *tool_call_json(const ts_chat_tool_call *c) {
    cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddItemToObject(call, "type", cJSON_CreateString("function"));
    cJSON_AddItemToObject(call, "function", fn);
    cJSON_AddItemToObject(fn, "name", cJSON_CreateString(c->name ? c->name : ""));
    ts_json_issue is; /* text cJSON would read wrongly (a \\u0000 cut short) stays text */
    cJSON *args = c->arguments && !ts_json_check(c->arguments, strlen(c->arguments), NULL, 0, &is)
                      ? cJSON_Parse(c->arguments)
                      : NULL;
    if (args && !cJSON_IsObject(args)) cJSON_Delete(args), args = NULL;
    cJSON_AddItemToObject(fn, "arguments",
                          args ? args : cJSON_CreateString(c->arguments ? c->arguments : ""));
    return call;
}

static cJSON *messages_json(const ts_chat_msg *msgs, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(a, m);
        cJSON_AddItemToObject(m, "role", cJSON_CreateString(msgs[i].role ? msgs[i].role : ""));
        cJSON_AddItemToObject(m, "content", cJSON_CreateString(msgs[i].content ? msgs[i].content : ""));
        if (msgs[i].reasoning_content)
            cJSON_AddItemToObject(m, "reasoning_content", cJSON_CreateString(msgs[i].reasoning_content));
        if (msgs[i].n_tool_calls) {
            cJSON *calls = cJSON_CreateArray();
            cJSON_AddItemToObject(m, "tool_calls", calls);
            for (size_t k = 0; k < msgs[i].n_tool_calls; k++)
                cJSON_AddItemToArray(calls, tool_call_json(&msgs[i].tool_calls[k]));
        }
    }
    return a;
}

static int render_jinja(const ts_chat_template *t, const ts_chat_msg *msgs, size_t n, const ts_chat_opts *o,
                        ts_text *out, char *err, size_t errlen) {
    cJSON *vars = o->kwargs_json ? cJSON_Parse(o->kwargs_json) : cJSON_CreateObject();
    if (!vars || !cJSON_IsObject(vars)) {
        cJSON_Delete(vars);
        return ts_errf(err, errlen, "chat_template_kwargs must be a JSON object");
    }
    static const char *const fixed[] = {"messages", "tools", "add_generation_prompt", "enable_thinking"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (i < 3 || o->enable_thinking >= 0) cJSON_DeleteItemFromObjectCaseSensitive(vars, fixed[i]);
    cJSON_AddItemToObject(vars, "messages", messages_json(msgs, n));
    cJSON *tools = o->n_tools ? cJSON_CreateArray() : cJSON_CreateNull();
    for (size_t i = 0; i < o->n_tools; i++) {
        cJSON *tool = cJSON_Parse(o->tools[i]);
        if (!tool) {
            cJSON_Delete(tools), cJSON_Delete(vars);
            return ts_errf(err, errlen, "tool %zu is not valid JSON", i);
        }
        cJSON_AddItemToArray(tools, tool);
    }
    cJSON_AddItemToObject(vars, "tools", tools);
    cJSON_AddItemToObject(vars, "add_generation_prompt", cJSON_CreateBool(o->add_generation_prompt));
    if (o->enable_thinking >= 0)
        cJSON_AddItemToObject(vars, "enable_thinking", cJSON_CreateBool(o->enable_thinking));
    int rc = ts_jinja_render(t->jinja, vars, out, err, errlen);
    cJSON_Delete(vars);
    return rc;
}

int ts_chat_template_render(const ts_chat_template *t, const ts_chat_msg *msgs, size_t n,
                            const ts_chat_opts *o, ts_text *out, char *err, size_t errlen) {
    if (t->kind != TS_CHAT_JINJA) return ts_chat_render(t->kind, msgs, n, o, out, err, errlen);
    ts_chat_opts d = {.add_generation_prompt = true, .enable_thinking = -1};
    return render_jinja(t, msgs, n, o ? o : &d, out, err, errlen);
}
