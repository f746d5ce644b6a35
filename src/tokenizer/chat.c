/* ChatML-family chat templates (see chat.h). The qwen3 rendering follows the Jinja of the Qwen3
 * templates statement by statement; the comments quote the expressions they implement. */
#include "tokenizer/chat.h"

#include "common/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct span {
    const char *s;
    size_t n;
} span;

static span sp(const char *s) {
    return (span){s ? s : "", s ? strlen(s) : 0};
}
static span lstrip_nl(span x) {
    while (x.n && x.s[0] == '\n') x.s++, x.n--;
    return x;
}
static span rstrip_nl(span x) {
    while (x.n && x.s[x.n - 1] == '\n') x.n--;
    return x;
}
static bool eq(const char *a, const char *b) {
    return a && !strcmp(a, b);
}

/* First / last occurrence of needle in x (NULL if none). */
static const char *find_first(span x, const char *needle) {
    return memmem(x.s, x.n, needle, strlen(needle));
}
static const char *find_last(span x, const char *needle) {
    size_t l = strlen(needle);
    const char *last = NULL;
    for (const char *p = x.s; (p = memmem(p, x.n - (size_t)(p - x.s), needle, l)); p++) last = p;
    return last;
}

typedef struct out_ctx {
    ts_text *out;
    int failed;
} out_ctx;

static void put(out_ctx *o, span x) {
    if (!o->failed && ts_text_append(o->out, x.s, x.n)) o->failed = 1;
}
static void puts_(out_ctx *o, const char *s) {
    put(o, sp(s));
}

const char *ts_chat_kind_name(ts_chat_kind k) {
    switch (k) {
    case TS_CHAT_JINJA:
        return "jinja";
    case TS_CHAT_CHATML:
        return "chatml";
    case TS_CHAT_QWEN3:
        return "qwen3";
    case TS_CHAT_QWEN3_THINKING:
        return "qwen3-thinking";
    }
    return "?";
}

int ts_chat_kind_from_name(const char *name, ts_chat_kind *k, char *err, size_t errlen) {
    for (int i = TS_CHAT_CHATML; i <= TS_CHAT_QWEN3_THINKING; i++)
        if (eq(name, ts_chat_kind_name((ts_chat_kind)i))) {
            *k = (ts_chat_kind)i;
            return 0;
        }
    return ts_errf(err, errlen, "unknown chat template '%s': choose chatml, qwen3 or qwen3-thinking",
                   name ? name : "");
}

static size_t count(const char *s, const char *needle) {
    size_t c = 0, l = strlen(needle);
    for (const char *p = s; (p = strstr(p, needle)); p += l) c++;
    return c;
}

int ts_chat_detect(const char *jinja, ts_chat_kind *k, char *err, size_t errlen) {
    static const char hint[] = "; choose one with --chat-template chatml, qwen3 or qwen3-thinking";
    if (!jinja || !*jinja)
        return ts_errf(err, errlen, "the model file has no chat template (tokenizer.chat_template)%s", hint);
    if (!strstr(jinja, "<|im_start|>") || !strstr(jinja, "<|im_end|>"))
        return ts_errf(
            err, errlen,
            "the model's chat template is not a ChatML one (no <|im_start|>/<|im_end|> turns), the only "
            "family turbospark renders%s",
            hint);
    if (strstr(jinja, "You are Qwen, created by Alibaba Cloud"))
        return ts_errf(
            err, errlen,
            "the model's chat template adds Qwen2.5's default system prompt, which turbospark does not "
            "render%s",
            hint);
    if (!strstr(jinja, "</think>")) {
        *k = TS_CHAT_CHATML;
        return 0;
    }
    /* The generation-prompt section: after the last mention of add_generation_prompt. */
    const char *tail = jinja, *p;
    for (p = jinja; (p = strstr(p, "add_generation_prompt")); p++) tail = p;
    *k = count(tail, "<think>") > count(tail, "</think>") ? TS_CHAT_QWEN3_THINKING : TS_CHAT_QWEN3;
    return 0;
}

int ts_chat_select(const char *override_name, const char *jinja, ts_chat_kind *k, char *err, size_t errlen) {
    if (override_name && *override_name) return ts_chat_kind_from_name(override_name, k, err, errlen);
    return ts_chat_detect(jinja, k, err, errlen);
}

static void turn(out_ctx *o, const char *role, span content) {
    puts_(o, "<|im_start|>");
    puts_(o, role);
    puts_(o, "\n");
    put(o, content);
    puts_(o, "<|im_end|>\n");
}

static bool is_tool_response(span c) {
    static const char a[] = "<tool_response>", b[] = "</tool_response>";
    return c.n >= sizeof a - 1 && !memcmp(c.s, a, sizeof a - 1) && c.n >= sizeof b - 1 &&
           !memcmp(c.s + c.n - (sizeof b - 1), b, sizeof b - 1);
}

static void render_qwen3(out_ctx *o, const ts_chat_msg *m, size_t n, const ts_chat_opts *opt) {
    if (opt->n_tools) { /* {%- if tools %} the system turn lists them */
        puts_(o, "<|im_start|>system\n");
        if (n > 0 && eq(m[0].role, "system")) puts_(o, m[0].content), puts_(o, "\n\n");
        puts_(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                 "provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (size_t i = 0; i < opt->n_tools; i++) puts_(o, "\n"), puts_(o, opt->tools[i]);
        puts_(o,
              "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
              "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
              "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (n > 0 && eq(m[0].role, "system")) { /* {%- if messages[0].role == 'system' %} */
        turn(o, "system", sp(m[0].content));
    }
    /* last_user: the last user message that is not a wrapped tool response (n - 1 if none) */
    size_t last_user = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;)
        if (eq(m[i].role, "user") && !is_tool_response(sp(m[i].content))) {
            last_user = i;
            break;
        }
    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role ? m[i].role : "";
        span content = sp(m[i].content);
        if (eq(role, "user") || (eq(role, "system") && i > 0)) {
            turn(o, role, content);
        } else if (eq(role, "assistant")) {
            span answer = content, thought = {"", 0};
            if (m[i].reasoning_content) {
                thought = sp(m[i].reasoning_content);
            } else if (find_first(answer, "</think>")) {
                /* answer.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *end = find_first(answer, "</think>");
                span before = rstrip_nl((span){answer.s, (size_t)(end - answer.s)});
                const char *open = find_last(before, "<think>");
                if (open) before = (span){open + 7, before.n - (size_t)(open + 7 - before.s)};
                thought = lstrip_nl(before);
                /* answer.split('</think>')[-1].lstrip('\n') */
                const char *last = find_last(answer, "</think>") + 8;
                answer = lstrip_nl((span){last, answer.n - (size_t)(last - answer.s)});
            }
            puts_(o, "<|im_start|>assistant\n");
            if (i > last_user && (i + 1 == n || thought.n)) {
                puts_(o, "<think>\n");
                put(o, rstrip_nl(lstrip_nl(thought)));
                puts_(o, "\n</think>\n\n");
                put(o, lstrip_nl(answer));
            } else {
                put(o, answer);
            }
            /* {%- if (loop.first and content) or (not loop.first) %}{{- '\n' }} — content after the
             * split above, as the template reassigns it */
            for (size_t k = 0; k < m[i].n_tool_calls; k++) {
                const ts_chat_tool_call *tc = &m[i].tool_calls[k];
                if (k > 0 || answer.n) puts_(o, "\n");
                puts_(o, "<tool_call>\n{\"name\": \"");
                puts_(o, tc->name);
                puts_(o, "\", \"arguments\": ");
                puts_(o, tc->arguments);
                puts_(o, "}\n</tool_call>");
            }
            puts_(o, "<|im_end|>\n");
        } else if (eq(role, "tool")) {
            if (i == 0 || !eq(m[i - 1].role, "tool")) puts_(o, "<|im_start|>user");
            puts_(o, "\n<tool_response>\n");
            put(o, content);
            puts_(o, "\n</tool_response>");
            if (i + 1 == n || !eq(m[i + 1].role, "tool")) puts_(o, "<|im_end|>\n");
        }
    }
}

int ts_chat_render(ts_chat_kind kind, const ts_chat_msg *msgs, size_t n, const ts_chat_opts *opts,
                   ts_text *out, char *err, size_t errlen) {
    ts_chat_opts d = {.add_generation_prompt = true, .enable_thinking = -1};
    const ts_chat_opts *o = opts ? opts : &d;
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !*msgs[i].role) return ts_errf(err, errlen, "chat message %zu has no role", i);
        if (msgs[i].n_tool_calls && kind == TS_CHAT_CHATML)
            return ts_errf(err, errlen,
                           "chat message %zu has tool calls, which the chatml template cannot show; use "
                           "--chat-template qwen3",
                           i);
    }
    if (o->n_tools && kind == TS_CHAT_CHATML)
        return ts_errf(err, errlen, "the chatml template cannot list tools; use --chat-template qwen3");
    out_ctx c = {out, 0};
    switch (kind) {
    case TS_CHAT_CHATML:
        for (size_t i = 0; i < n; i++) turn(&c, msgs[i].role, sp(msgs[i].content));
        if (o->add_generation_prompt) puts_(&c, "<|im_start|>assistant\n");
        break;
    case TS_CHAT_QWEN3:
    case TS_CHAT_QWEN3_THINKING:
        render_qwen3(&c, msgs, n, o);
        if (o->add_generation_prompt) {
            puts_(&c, "<|im_start|>assistant\n");
            if (o->enable_thinking == 0)
                puts_(&c, "<think>\n\n</think>\n\n");
            else if (kind == TS_CHAT_QWEN3_THINKING)
                puts_(&c, "<think>\n");
        }
        break;
    default:
        return ts_errf(err, errlen, "unknown chat template kind %d", (int)kind);
    }
    return c.failed ? ts_errf(err, errlen, "out of memory rendering the chat") : 0;
}

/* ---- tojson --------------------------------------------------------------------------------- */

static int json_str(ts_text *out, const char *s) {
    static const char hex[] = "0123456789abcdef";
    int rc = ts_text_append(out, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p && !rc; p++) {
        char e[7] = {'\\', 0};
        size_t k = 2;
        switch (*p) {
        case '"':
            e[1] = '"';
            break;
        case '\\':
            e[1] = '\\';
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        case '\b':
            e[1] = 'b';
            break;
        case '\f':
            e[1] = 'f';
            break;
        default:
            if (*p < 0x20)
                e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[*p >> 4], e[5] = hex[*p & 15], k = 6;
            else
                e[0] = (char)*p, k = 1;
        }
        rc = ts_text_append(out, e, k);
    }
    return rc | ts_text_append(out, "\"", 1);
}

/* Python's repr of a float is the shortest text that reads back the same; an integral JSON number
 * (cJSON keeps no int/float distinction) is written as an int. */
static int json_num(ts_text *out, double x) {
    char b[40];
    if (x == floor(x) && fabs(x) < 1e16)
        snprintf(b, sizeof b, "%.0f", x);
    else if (!isfinite(x))
        snprintf(b, sizeof b, "%s", isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
    else
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(b, sizeof b, "%.*g", prec, x);
            if (strtod(b, NULL) == x) break;
        }
    return ts_text_append(out, b, strlen(b));
}

int ts_chat_tojson(const void *cjson, ts_text *out) {
    const cJSON *v = cjson;
    if (!v || cJSON_IsNull(v)) return ts_text_append(out, "null", 4);
    if (cJSON_IsTrue(v)) return ts_text_append(out, "true", 4);
    if (cJSON_IsFalse(v)) return ts_text_append(out, "false", 5);
    if (cJSON_IsNumber(v)) return json_num(out, v->valuedouble);
    if (cJSON_IsString(v)) return json_str(out, v->valuestring);
    bool obj = cJSON_IsObject(v);
    int rc = ts_text_append(out, obj ? "{" : "[", 1);
    for (const cJSON *c = v->child; c && !rc; c = c->next) {
        if (c != v->child) rc |= ts_text_append(out, ", ", 2);
        if (obj) rc |= json_str(out, c->string ? c->string : "") | ts_text_append(out, ": ", 2);
        rc |= ts_chat_tojson(c, out);
    }
    return rc | ts_text_append(out, obj ? "}" : "]", 1);
}
