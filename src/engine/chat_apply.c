/* The public chat API (include/turbospark.h): a ts_chat holds the template chosen for a tokenizer
 * (src/tokenizer/chat.h: the Jinja engine or a built-in kind); ts_chat_apply reads OpenAI-style
 * messages, tools and template variables from JSON text into chat.h's structures and renders them
 * there. Keys a message does not use (name, tool_call_id, ...) are ignored, and so are template
 * variables a template does not mention, as Jinja ignores them. */
#include "turbospark.h"

#include "common/error.h"
#include "common/json_check.h"
#include "tokenizer/chat.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* What the structures point to: the parsed JSON and the texts made from it. */
typedef struct chat_input {
    cJSON *messages, *tools, *kwargs;
    ts_chat_msg *msgs;
    ts_chat_tool_call *calls;
    const char **tool_texts;
    ts_text *owned; /* [n_owned] content joined from parts, arguments and tools re-encoded */
    size_t n_owned, cap_owned;
} chat_input;

static ts_text *new_text(chat_input *in) {
    if (in->n_owned == in->cap_owned) return NULL; /* sized before use */
    in->owned[in->n_owned] = (ts_text){0};
    return &in->owned[in->n_owned++];
}

static const char *json_text(chat_input *in, const cJSON *v) {
    ts_text *t = new_text(in);
    return t && !ts_chat_tojson(v, t) && !ts_text_append(t, "", 1) ? t->s : NULL;
}

static int parse(const char *what, const char *text, int want_array, cJSON **out, char *err, size_t errlen) {
    *out = NULL; /* a NUL (\\u0000) would end a cJSON string early: refused, as the server refuses it */
    if (ts_json_check_text(what, text, strlen(text), "a chat's rendering", err, errlen)) return -1;
    *out = cJSON_Parse(text);
    if (!*out) return ts_errf(err, errlen, "%s is not valid JSON", what);
    if (want_array ? !cJSON_IsArray(*out) : !cJSON_IsObject(*out))
        return ts_errf(err, errlen, "%s must be a JSON %s", what, want_array ? "array" : "object");
    return 0;
}

/* content: a string, null, or an array of {"type": "text", "text": ...} parts (joined by newlines,
 * as the server joins them). */
static int content_text(chat_input *in, const cJSON *c, int i, const char **out, char *err, size_t errlen) {
    if (!c || cJSON_IsNull(c)) return *out = "", 0;
    if (cJSON_IsString(c)) return *out = c->valuestring, 0;
    if (!cJSON_IsArray(c))
        return ts_errf(err, errlen, "messages[%d].content must be a string or an array of parts", i);
    ts_text *t = new_text(in);
    if (!t) return ts_errf(err, errlen, "out of memory rendering a chat");
    const cJSON *p;
    int k = 0;
    cJSON_ArrayForEach(p, c) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"),
                    *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx))
            return ts_errf(
                err, errlen,
                "messages[%d].content[%d] is not a text part ({\"type\": \"text\", \"text\": ...}): only "
                "the text model is loaded",
                i, k);
        if ((k > 0 && ts_text_append(t, "\n", 1)) ||
            ts_text_append(t, tx->valuestring, strlen(tx->valuestring)))
            return ts_errf(err, errlen, "out of memory rendering a chat");
        k++;
    }
    if (ts_text_append(t, "", 1)) return ts_errf(err, errlen, "out of memory rendering a chat");
    *out = t->s;
    return 0;
}

static int read_message(chat_input *in, const cJSON *m, int i, ts_chat_tool_call **calls, char *err,
                        size_t errlen) {
    ts_chat_msg *cm = &in->msgs[i];
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role))
        return ts_errf(err, errlen, "messages[%d] must be an object with a string role", i);
    const char *r = role->valuestring;
    cm->role = !strcmp(r, "developer") ? "system" : r;
    if (strcmp(cm->role, "system") && strcmp(cm->role, "user") && strcmp(cm->role, "assistant") &&
        strcmp(cm->role, "tool"))
        return ts_errf(err, errlen,
                       "messages[%d].role is '%.32s'; expected system, developer, user, assistant or tool", i,
                       r);
    if (content_text(in, cJSON_GetObjectItemCaseSensitive(m, "content"), i, &cm->content, err, errlen))
        return -1;
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    if (rc && !cJSON_IsNull(rc) && !cJSON_IsString(rc))
        return ts_errf(err, errlen, "messages[%d].reasoning_content must be a string", i);
    cm->reasoning_content = cJSON_IsString(rc) ? rc->valuestring : NULL;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *c;
    if (tc && !cJSON_IsNull(tc) && !cJSON_IsArray(tc))
        return ts_errf(err, errlen, "messages[%d].tool_calls must be an array", i);
    cm->tool_calls = *calls;
    int k = 0;
    cJSON_ArrayForEach(c, tc) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name"),
                    *a = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (!cJSON_IsString(nm) || (a && !cJSON_IsString(a) && !cJSON_IsObject(a)))
            return ts_errf(err, errlen,
                           "messages[%d].tool_calls[%d] must be {\"function\": {\"name\", \"arguments\"}}", i,
                           k);
        ts_chat_tool_call *call = (*calls)++;
        call->name = nm->valuestring;
        call->arguments = !a ? "{}" : cJSON_IsString(a) ? a->valuestring : json_text(in, a);
        if (!call->arguments) return ts_errf(err, errlen, "out of memory rendering a chat");
        k++;
    }
    cm->n_tool_calls = (size_t)k;
    return 0;
}

static size_t count_calls(const cJSON *messages) {
    size_t n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) n +=
        (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
    return n;
}

struct ts_chat {
    ts_chat_template tpl;
};

static int render(chat_input *in, const ts_chat *chat, const char *kwargs_json, bool add_generation_prompt,
                  ts_text *out, char *err, size_t errlen) {
    const int n_msgs = cJSON_GetArraySize(in->messages),
              n_tools = in->tools ? cJSON_GetArraySize(in->tools) : 0;
    const size_t n_calls = count_calls(in->messages);
    in->cap_owned = (size_t)n_msgs + n_calls + (size_t)n_tools;
    in->owned = calloc(in->cap_owned + 1, sizeof *in->owned);
    in->msgs = calloc((size_t)n_msgs + 1, sizeof *in->msgs);
    in->calls = calloc(n_calls + 1, sizeof *in->calls);
    in->tool_texts = calloc((size_t)n_tools + 1, sizeof *in->tool_texts);
    if (!in->owned || !in->msgs || !in->calls || !in->tool_texts)
        return ts_errf(err, errlen, "out of memory rendering a chat");
    ts_chat_tool_call *calls = in->calls;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, in->messages) if (read_message(in, m, i++, &calls, err, errlen)) return -1;
    for (i = 0; i < n_tools; i++)
        if (!(in->tool_texts[i] = json_text(in, cJSON_GetArrayItem(in->tools, i))))
            return ts_errf(err, errlen, "out of memory rendering a chat");
    ts_chat_opts o = {.add_generation_prompt = add_generation_prompt,
                      .enable_thinking = -1,
                      .tools = in->tool_texts,
                      .n_tools = (size_t)n_tools,
                      .kwargs_json = kwargs_json};
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(in->kwargs, "enable_thinking");
    if (th && !cJSON_IsBool(th))
        return ts_errf(err, errlen, "the template variable enable_thinking must be true or false");
    if (th) o.enable_thinking = cJSON_IsTrue(th);
    return ts_chat_template_render(&chat->tpl, in->msgs, (size_t)n_msgs, &o, out, err, errlen);
}

int ts_chat_apply(const ts_chat *chat, const char *messages_json, const char *tools_json,
                  const char *kwargs_json, bool add_generation_prompt, char **out, size_t *len, char *err,
                  size_t errlen) {
    *out = NULL;
    if (len) *len = 0;
    chat_input in = {0};
    ts_text text = {0};
    int rc = parse("the messages", messages_json ? messages_json : "", 1, &in.messages, err, errlen);
    if (!rc && tools_json) rc = parse("the tools", tools_json, 1, &in.tools, err, errlen);
    if (rc && cJSON_IsNull(in.tools)) rc = 0, cJSON_Delete(in.tools), in.tools = NULL; /* null: no tools */
    if (!rc && kwargs_json) rc = parse("the template variables", kwargs_json, 0, &in.kwargs, err, errlen);
    if (!rc) rc = render(&in, chat, kwargs_json, add_generation_prompt, &text, err, errlen);
    if (!rc && ts_text_append(&text, "", 1)) rc = ts_errf(err, errlen, "out of memory rendering a chat");
    for (size_t i = 0; i < in.n_owned; i++) ts_text_free(&in.owned[i]);
    free(in.owned), free(in.msgs), free(in.calls), free(in.tool_texts);
    cJSON_Delete(in.messages), cJSON_Delete(in.tools), cJSON_Delete(in.kwargs);
    if (rc) {
        ts_text_free(&text);
        return -1;
    }
    *out = text.s;
    if (len) *len = text.n - 1;
    return 0;
}

int ts_chat_new(const ts_tokenizer *t, const char *template_name, const char *template_file, bool use_jinja,
                ts_chat **out, char *note, size_t notelen, char *err, size_t errlen) {
    *out = NULL;
    if (note && notelen) note[0] = 0;
    ts_chat *c = calloc(1, sizeof *c);
    if (!c) return ts_errf(err, errlen, "out of memory choosing a chat template");
    if (ts_chat_template_choose(&c->tpl, template_name && *template_name ? template_name : NULL,
                                template_file && *template_file ? template_file : NULL,
                                ts_tokenizer_chat_template(t), use_jinja, note, notelen, err, errlen)) {
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void ts_chat_free(ts_chat *c) {
    if (!c) return;
    ts_chat_template_free(&c->tpl);
    free(c);
}

const char *ts_chat_name(const ts_chat *c) {
    return ts_chat_template_name(&c->tpl);
}
