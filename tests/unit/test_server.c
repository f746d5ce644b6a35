/* The server's protocol layer and the shared generation text:
 *   - ts_api_parse accepts every supported field with its meaning, and refuses bad input with the
 *     right status, param and code (wrong types, ranges, unsupported features by name, content
 *     parts other than text);
 *   - responses and SSE chunks are valid JSON whatever bytes the text holds;
 *   - slot file names are checked as llama.cpp's fs_validate_filename checks them;
 *   - ts_textgen (engine/generate.h) on the demo tokenizer: what it releases is always valid UTF-8,
 *     never changes afterwards, never shows the start of a stop string, and the final text is the
 *     decoded text cut before the earliest stop string. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/generate.h"
#include "gguf/gguf.h"
#include "server/openai.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ts_sampler_params g_def;

static int parse(ts_api_kind k, const char *body, ts_api_request *r, ts_api_error *e) {
    return ts_api_parse(k, body, strlen(body), &g_def, 0, r, e);
}

/* Expects a refusal with this status, param ("" for null) and code. */
static void refused(ts_api_kind k, const char *body, int status, const char *param, const char *code) {
    ts_api_request r;
    ts_api_error e;
    if (parse(k, body, &r, &e) == 0) fail_msg("accepted: %s", body);
    if (e.status != status || strcmp(e.param, param) != 0 || (code && (!e.code || strcmp(e.code, code) != 0)))
        fail_msg("%s\n  -> %d param '%s' code '%s': %s", body, e.status, e.param, e.code ? e.code : "null",
                 e.message);
}

#define TOOL_F "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}"

static void test_tool_fields(void **state) {
    (void)state;
    ts_api_request r;
    ts_api_error e;
    const char *b =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"a\\\": 1}\"}},{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":{\"b\":[true]}}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"ok\"}]"
        ","
        "\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
        "\"parallel_tool_calls\":false,\"response_format\":{\"type\":\"text\"}}";
    if (parse(TS_API_CHAT, b, &r, &e)) fail_msg("%s", e.message);
    assert_int_equal(r.n_tools, 1);
    assert_non_null(r.tools_json);
    assert_int_equal(r.tool_choice, TS_TOOLS_NAMED);
    assert_string_equal(r.tool_name, "f");
    assert_false(r.parallel_tool_calls);
    /* normalized for ts_chat_apply: content null is "", arguments as given (a string, or an object) */
    assert_string_equal(r.messages_json,
                        "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\","
                        "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}},"
                        "{\"function\":{\"name\":\"f\",\"arguments\":{\"b\":[true]}}}]},"
                        "{\"role\":\"tool\",\"content\":\"ok\"}]");
    ts_api_request_free(&r);
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":{\"type\":\"json_"
        "schema\","
        "\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}";
    if (parse(TS_API_CHAT, b, &r, &e)) fail_msg("%s", e.message);
    assert_int_equal(r.format, TS_FORMAT_JSON_SCHEMA);
    assert_string_equal(r.schema_json, "{\"type\":\"object\"}");
    assert_true(r.parallel_tool_calls);
    assert_int_equal(r.tool_choice, TS_TOOLS_AUTO);
    ts_api_request_free(&r);
    /* llama-server's fields, on completions too */
    b = "{\"prompt\":\"x\",\"grammar\":\"root ::= [ab]+\"}";
    if (parse(TS_API_COMPLETION, b, &r, &e)) fail_msg("%s", e.message);
    assert_string_equal(r.grammar, "root ::= [ab]+");
    ts_api_request_free(&r);
    b = "{\"prompt\":\"x\",\"grammar\":\"\",\"json_schema\":{\"type\":\"integer\"}}";
    if (parse(TS_API_COMPLETION, b, &r, &e)) fail_msg("%s", e.message);
    assert_null(r.grammar);
    assert_int_equal(r.format, TS_FORMAT_JSON_SCHEMA);
    assert_string_equal(r.schema_json, "{\"type\":\"integer\"}");
    ts_api_request_free(&r);
}

static void test_chat_fields(void **state) {
    (void)state;
    ts_api_request r;
    ts_api_error e;
    const char *b =
        "{\"model\":\"x\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":"
        "\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hmm\"},{\"role\":\"user\","
        "\"content\":\"c\"}],"
        "\"max_completion_tokens\":7,\"temperature\":0,\"top_p\":0.5,\"top_k\":-1,\"min_p\":0.1,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"seed\":-1,"
        "\"stop\":[\"x\",\"\",\"yz\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},\"n\":1,"
        "\"logprobs\":false,\"tools\":[],\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false},\"user\":\"u\",\"unknown_field\":[1,2]}";
    if (parse(TS_API_CHAT, b, &r, &e)) fail_msg("%s", e.message);
    assert_string_equal(r.model, "x");
    assert_int_equal(r.n_msgs, 4);
    assert_string_equal(
        r.messages_json, /* developer is system, text parts joined by newlines */
        "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"a\\nb\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"hmm\"},"
        "{\"role\":\"user\",\"content\":\"c\"}]");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.sp.temperature == 0 && r.sp.top_p == 0.5f && r.sp.top_k == 0 && r.sp.min_p == 0.1f);
    assert_true(r.sp_given[TS_SAMPLING_TEMP] && r.sp_given[TS_SAMPLING_TOP_K]);
    assert_true(r.sp.presence_penalty == 0.5f && r.sp.frequency_penalty == -0.5f &&
                r.sp.repeat_penalty == 1.1f);
    assert_true(r.seed_given && r.sp.seed == UINT64_MAX);
    assert_int_equal(r.n_stops, 2); /* the empty one is dropped */
    assert_string_equal(r.stops[1], "yz");
    assert_true(r.stream && r.include_usage);
    assert_int_equal(r.enable_thinking, 0);
    ts_api_request_free(&r);

    /* defaults: what the request leaves out */
    assert_int_equal(
        parse(TS_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":null}", &r, &e),
        0);
    assert_int_equal(r.max_tokens, -1);
    assert_true(r.sp.temperature == g_def.temperature && !r.sp_given[TS_SAMPLING_TEMP] && !r.seed_given);
    assert_false(r.stream);
    assert_int_equal(r.n_stops, 0);
    assert_int_equal(r.enable_thinking, -1);
    assert_true(r.cache_prompt);
    ts_api_request_free(&r);
}

static void test_completion_prompts(void **state) {
    (void)state;
    ts_api_request r;
    ts_api_error e;
    assert_int_equal(parse(TS_API_COMPLETION, "{\"prompt\":\"In the beginning\",\"stop\":\"\\n\"}", &r, &e),
                     0);
    assert_false(r.prompt_is_ids);
    assert_string_equal(r.prompt, "In the beginning");
    assert_string_equal(r.stops[0], "\n");
    ts_api_request_free(&r);
    assert_int_equal(parse(TS_API_COMPLETION, "{\"prompt\":[\"one\"]}", &r, &e), 0);
    assert_string_equal(r.prompt, "one");
    ts_api_request_free(&r);
    assert_int_equal(parse(TS_API_COMPLETION, "{\"prompt\":[5,6,7],\"max_tokens\":-1}", &r, &e), 0);
    assert_true(r.prompt_is_ids);
    assert_int_equal(r.prompt_ids.n, 3);
    assert_int_equal(r.prompt_ids.ids[2], 7);
    assert_int_equal(r.max_tokens, -1);
    ts_api_request_free(&r);
    assert_int_equal(parse(TS_API_COMPLETION, "{\"prompt\":[[1,2]]}", &r, &e), 0);
    assert_int_equal(r.prompt_ids.n, 2);
    ts_api_request_free(&r);
    refused(TS_API_COMPLETION, "{\"prompt\":[[]]}", 400, "prompt[0]", "invalid_value"); /* found by fuzzing */
    /* \u0000 in a prompt is carried whole: the tokenizer takes the text with its length */
    assert_int_equal(parse(TS_API_COMPLETION, "{\"prompt\":\"ab\\u0000cd\"}", &r, &e), 0);
    assert_int_equal(r.prompt_len, 5);
    assert_memory_equal(r.prompt, "ab\0cd", 6);
    ts_api_request_free(&r);
    assert_int_equal(parse(TS_API_COMPLETION, "{\"prompt\":[\"\\u0000x\\u0000\"]}", &r, &e), 0);
    assert_int_equal(r.prompt_len, 3);
    assert_memory_equal(r.prompt, "\0x\0", 4);
    ts_api_request_free(&r);
}

/* Every string a request may hold, with \u0000 inside: refused with the field's name, except the
 * completion prompt and /tokenize's content (carried whole, above and below); lone surrogates,
 * \u escapes that are not four hex digits and invalid UTF-8 are refused in every field. */
static void test_nul_fields(void **state) {
    (void)state;
    const ts_api_kind C = TS_API_CHAT, P = TS_API_COMPLETION;
    const char *u = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[2048];
#define WITH(extra) (snprintf(b, sizeof b, "{%s,%s}", u, extra), b)
#define NUL "\\u0000"
    static const struct {
        const char *extra, *param;
    } chat[] = {
        {"\"model\":\"demo" NUL "\"", "model"},
        {"\"stop\":\"a" NUL "b\"", "stop"},
        {"\"stop\":[\"x\",\"a" NUL "\"]", "stop[1]"},
        {"\"user\":\"" NUL "\"", "user"}, /* a field the server ignores is refused too */
        {"\"grammar\":\"root ::= \\\"a" NUL "\\\"\"", "grammar"},
        {"\"json_schema\":{\"type\":\"string\",\"enum\":[\"a" NUL "\"]}", "json_schema.enum[0]"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{"
         "\"const\":\"" NUL "\"}}}",
         "response_format.json_schema.schema.const"},
        {"\"response_format\":{\"type\":\"json_object" NUL "\"}", "response_format.type"},
        {"\"chat_template_kwargs\":{\"x\":\"" NUL "\"}", "chat_template_kwargs.x"},
        {"\"tool_choice\":\"auto" NUL "\"", "tool_choice"},
        {"\"logit_bias\":{\"11" NUL "\":5}", "logit_bias"}, /* a key */
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f" NUL "\"}}]",
         "tools[0].function.name"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"" NUL "\"}}]",
         "tools[0].function.description"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{"
         "\"x\":{"
         "\"description\":\"" NUL "\"}}}}}]",
         "tools[0].function.parameters.properties.x.description"},
        {"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f" NUL "\"}}",
         "tool_choice.function.name"},
    };
    char want[256];
    for (size_t i = 0; i < sizeof chat / sizeof *chat; i++) {
        ts_api_request r;
        ts_api_error e;
        WITH(chat[i].extra);
        if (parse(C, b, &r, &e) == 0) fail_msg("accepted: %s", b);
        if (e.status != 400 || strcmp(e.param, chat[i].param) || strcmp(e.code, "invalid_value"))
            fail_msg("%s\n  -> %d param '%s' code '%s': %s", b, e.status, e.param, e.code, e.message);
        snprintf(want, sizeof want,
                 "%s'%s' contains a NUL character (\\u0000), which this server cannot carry",
                 strstr(chat[i].extra, NUL "\":") ? "a key of " : "", chat[i].param);
        assert_string_equal(e.message, want);
    }
    static const struct {
        const char *body, *param;
    } msgs[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},{"
         "\"role\":"
         "\"user\",\"content\":\"abc" NUL "def\"}]}",
         "messages[2].content"},
        {"{\"messages\":[{\"role\":\"user" NUL "\",\"content\":\"a\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
         "\"text\","
         "\"text\":\"b" NUL "\"}]}]}",
         "messages[0].content[1].text"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text" NUL "\",\"text\":\"a\"}]}]}",
         "messages[0].content[0].type"},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"r" NUL "\"}]}",
         "messages[0].reasoning_content"},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":"
         "\"function\","
         "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":\\\"" NUL "\\\"}\"}}]}]}",
         "messages[0].tool_calls[0].function.arguments"},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":"
         "\"function\","
         "\"function\":{\"name\":\"f\",\"arguments\":{\"x\":\"" NUL "\"}}}]}]}",
         "messages[0].tool_calls[0].function.arguments.x"},
        {"{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"c" NUL "\",\"content\":\"ok\"}]}",
         "messages[0].tool_call_id"},
    };
    for (size_t i = 0; i < sizeof msgs / sizeof *msgs; i++) {
        refused(C, msgs[i].body, 400, msgs[i].param, "invalid_value");
        refused(P, msgs[i].body, 400, msgs[i].param,
                "invalid_value"); /* refused before the fields are read */
    }
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens" NUL "\":1}", 400, "",
            "invalid_value"); /* a key of the body: param null */
    refused(C, "{\"messages\":[{\"role\":\"user\",\"con" NUL "tent\":\"hi\"}]}", 400, "messages[0]",
            "invalid_value");
    refused(P, "{\"prompt\":\"x\",\"stop\":[\"" NUL "\"]}", 400, "stop[0]", "invalid_value");
    refused(P, "{\"prompt\":\"x\",\"suffix\":\"" NUL "\"}", 400, "suffix", "invalid_value");
    refused(P, "{\"prompt\":\"x\",\"model\":\"" NUL "\"}", 400, "model", "invalid_value");
    refused(P, "{\"prompt\":\"x\",\"prompt_x\":\"" NUL "\"}", 400, "prompt_x", "invalid_value");
    /* the other escapes cJSON would read wrongly, and raw bytes that are not UTF-8 */
    refused(P, "{\"prompt\":\"a\\ud800b\"}", 400, "prompt", "invalid_value");
    refused(P, "{\"prompt\":\"a\\udfffb\"}", 400, "prompt", "invalid_value");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud83d x\"}]}", 400, "messages[0].content",
            "invalid_value");
    refused(P, "{\"prompt\":\"a\\uZZZZb\"}", 400, "", "invalid_json"); /* cJSON reads \uZZZZ as \u0000 */
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\u00g0\"}]}", 400, "", "invalid_json");
    refused(P,
            "{\"prompt\":\"a\xc0\x80"
            "b\"}",
            400, "prompt", "invalid_value"); /* an overlong NUL */
    refused(P, "{\"prompt\":\"And \xff\xfe the\"}", 400, "prompt", "invalid_value");
    refused(P, "{\"prompt\":\"\xed\xa0\x80\"}", 400, "prompt", "invalid_value"); /* an encoded surrogate */
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\xc3\"}]}", 400, "messages[0].content",
            "invalid_value");
    ts_api_request r;
    ts_api_error e;
    assert_int_equal(parse(P, "{\"prompt\":\"\\ud83d\\ude00 \xf0\x9f\x98\x80 \\\\u0000\"}", &r, &e), 0);
    assert_string_equal(r.prompt, "\xf0\x9f\x98\x80 \xf0\x9f\x98\x80 \\u0000"); /* a pair; a backslash */
    ts_api_request_free(&r);
    /* a duplicate "prompt": cJSON reads the first, and so does the carried text */
    assert_int_equal(parse(P, "{\"prompt\":\"a" NUL "b\",\"prompt\":\"c" NUL "d\"}", &r, &e), 0);
    assert_int_equal(r.prompt_len, 3);
    assert_memory_equal(r.prompt, "a\0b", 3);
    ts_api_request_free(&r);
    assert_int_equal(parse(P, "{\"prompt\":\"ab\",\"prompt\":\"c" NUL "d\"}", &r, &e), 0);
    assert_int_equal(r.prompt_len, 2);
    ts_api_request_free(&r);

    /* /tokenize: content carried whole; every other string refused */
    ts_api_tokenize t;
    const char *tb = "{\"content\":\"x" NUL "y" NUL "\",\"with_pieces\":true}";
    assert_int_equal(ts_api_parse_tokenize(tb, strlen(tb), 0, &t, &e), 0);
    assert_int_equal(t.n_content, 4);
    assert_memory_equal(t.content, "x\0y\0", 5);
    assert_true(t.with_pieces);
    free(t.content);
    static const char *const tbad[][2] = {
        {"{\"content\":\"x\",\"extra\":\"" NUL "\"}", "extra"},
        {"{\"content\":\"x\\udc00\"}", "content"},
        {"{\"content\":\"\xc0\xaf\"}", "content"},
        {"{\"x\":{\"content\":\"" NUL "\"}}", "x.content"},
    };
    for (size_t i = 0; i < sizeof tbad / sizeof *tbad; i++) {
        if (ts_api_parse_tokenize(tbad[i][0], strlen(tbad[i][0]), 0, &t, &e) == 0)
            fail_msg("accepted %s", tbad[i][0]);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, tbad[i][1]);
    }
    /* /detokenize: no text in, but its body is checked the same way */
    ts_tokens ids;
    const char *db = "{\"tokens\":[1],\"note\":\"" NUL "\"}";
    assert_int_equal(ts_api_parse_detokenize(db, strlen(db), 0, 100, &ids, &e), -1);
    assert_string_equal(e.param, "note");
#undef NUL
#undef WITH
}

static void test_refusals(void **state) {
    (void)state;
    const ts_api_kind C = TS_API_CHAT, P = TS_API_COMPLETION;
    const char *u = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char b[1024];
#define WITH(extra) (snprintf(b, sizeof b, "{%s,%s}", u, extra), b)
    refused(C, "", 400, "", "invalid_json");
    /* every sampling value as the float the sampler uses: 1e-50 is above 0 as a double, 0.0f as a float */
    refused(C, WITH("\"repetition_penalty\":1e-50"), 400, "repetition_penalty", "invalid_value");
    refused(C, WITH("\"repeat_penalty\":1e-7"), 400, "repeat_penalty", "invalid_value");
    refused(P, "{\"prompt\":\"x\",\"repetition_penalty\":0}", 400, "repetition_penalty", "invalid_value");
    refused(C, "{\"messages\":", 400, "", "invalid_json");
    refused(C, "{} {}", 400, "", "invalid_json");
    refused(C, "[1]", 400, "", "invalid_type");
    refused(C, "{}", 400, "messages", "missing_required_parameter");
    refused(C, "{\"messages\":\"hi\"}", 400, "messages", "invalid_type");
    refused(C, "{\"messages\":[]}", 400, "messages", "invalid_value");
    refused(C, "{\"messages\":[3]}", 400, "messages[0]", "invalid_type");
    refused(C, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", "invalid_type");
    refused(C, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role",
            "invalid_value");
    refused(C, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content",
            "missing_required_parameter");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content",
            "invalid_type");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
            400, "messages[0].content[0].type", "unsupported_content_type");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", 400,
            "messages[0].content[0].type", "unsupported_content_type");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video_url\"}]}]}", 400,
            "messages[0].content[0].type", "unsupported_content_type");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"hologram\"}]}]}", 400,
            "messages[0].content[0]", "invalid_value");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", 400,
            "messages[0].content[0]", "invalid_type");
    refused(C, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{}]}]}", 400,
            "messages[0].tool_calls[0]", "invalid_value");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"\",\"tool_calls\":[{}]}]}", 400,
            "messages[0].tool_calls", "invalid_value");
    refused(C, WITH("\"n\":17"), 400, "n", "unsupported_parameter");
    refused(C, WITH("\"n\":0"), 400, "n", "invalid_value");
    refused(C, WITH("\"n\":\"2\""), 400, "n", "invalid_type");
    refused(C, WITH("\"logprobs\":1"), 400, "logprobs", "invalid_type");
    refused(C, WITH("\"top_logprobs\":3"), 400, "top_logprobs", "invalid_value");
    refused(C, WITH("\"logprobs\":true,\"top_logprobs\":21"), 400, "top_logprobs", "invalid_value");
    {
        ts_api_request r;
        ts_api_error e;
        assert_int_equal(parse(C, WITH("\"n\":3,\"logprobs\":true,\"top_logprobs\":5"), &r, &e), 0);
        assert_int_equal(r.n_choices, 3);
        assert_int_equal(r.logprobs, 5);
        ts_api_request_free(&r);
        assert_int_equal(parse(C, WITH("\"logprobs\":true"), &r, &e), 0);
        assert_int_equal(r.logprobs, 0);
        ts_api_request_free(&r);
        assert_int_equal(parse(C, WITH("\"logprobs\":false"), &r, &e), 0);
        assert_int_equal(r.logprobs, -1);
        assert_int_equal(r.n_choices, 1);
        ts_api_request_free(&r);
        assert_int_equal(parse(P, "{\"prompt\":\"x\",\"logprobs\":0}", &r, &e), 0);
        assert_int_equal(r.logprobs, 0);
        ts_api_request_free(&r);
    }
    refused(C, WITH("\"tools\":[{\"type\":\"function\"}]"), 400, "tools[0]", "invalid_value");
    refused(C, WITH("\"tools\":{}"), 400, "tools", "invalid_type");
    refused(C, WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]"), 400, "tools[0]",
            "invalid_value");
    refused(C, WITH("\"tools\":[" TOOL_F "," TOOL_F "]"), 400, "tools[1]", "invalid_value");
    refused(C, WITH("\"tool_choice\":\"required\""), 400, "tool_choice", "invalid_value");
    refused(C, WITH("\"tools\":[" TOOL_F "],\"tool_choice\":\"any\""), 400, "tool_choice", "invalid_value");
    refused(
        C,
        WITH("\"tools\":[" TOOL_F "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"),
        400, "tool_choice", "invalid_value");
    refused(C,
            WITH("\"tools\":[" TOOL_F
                 "],\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}"),
            400, "response_format", "invalid_value");
    refused(C, WITH("\"response_format\":{\"type\":\"xml\"}"), 400, "response_format.type", "invalid_value");
    refused(C, WITH("\"response_format\":{\"type\":\"json_schema\"}"), 400,
            "response_format.json_schema.schema", "invalid_value");
    refused(C, WITH("\"functions\":[{\"name\":\"f\"}]"), 400, "functions", "unsupported_parameter");
    refused(C, WITH("\"grammar\":5"), 400, "grammar", "invalid_type");
    refused(TS_API_COMPLETION, "{\"prompt\":\"x\",\"json_schema\":\"{}\"}", 400, "json_schema",
            "invalid_type");
    refused(C, WITH("\"grammar\":\"root ::= [a]\",\"response_format\":{\"type\":\"json_object\"}"), 400,
            "grammar", "invalid_value");
    refused(TS_API_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= [a]\",\"json_schema\":{}}", 400,
            "grammar", "invalid_value");
    refused(TS_API_COMPLETION, "{\"prompt\":\"x\",\"tools\":[" TOOL_F "]}", 400, "tools",
            "unsupported_parameter");
    refused(C, WITH("\"logit_bias\":{\"5\":100}"), 400, "logit_bias", "unsupported_parameter");
    refused(C, WITH("\"audio\":{\"voice\":\"x\"}"), 400, "audio", "unsupported_parameter");
    refused(C, WITH("\"modalities\":[\"text\",\"audio\"]"), 400, "modalities", "unsupported_parameter");
    refused(C, WITH("\"max_tokens\":\"10\""), 400, "max_tokens", "invalid_type");
    refused(C, WITH("\"max_tokens\":1.5"), 400, "max_tokens", "invalid_type");
    refused(C, WITH("\"max_tokens\":0"), 400, "max_tokens", "invalid_value");
    refused(C, WITH("\"max_tokens\":1e999"), 400, "max_tokens", NULL);
    refused(C, WITH("\"temperature\":3"), 400, "temperature", "invalid_value");
    refused(C, WITH("\"temperature\":\"hot\""), 400, "temperature", "invalid_type");
    refused(C, WITH("\"top_p\":1.5"), 400, "top_p", "invalid_value");
    refused(C, WITH("\"min_p\":-0.1"), 400, "min_p", "invalid_value");
    refused(C, WITH("\"top_k\":2.5"), 400, "top_k", "invalid_type");
    refused(C, WITH("\"presence_penalty\":5"), 400, "presence_penalty", "invalid_value");
    refused(C, WITH("\"repetition_penalty\":0"), 400, "repetition_penalty", "invalid_value");
    refused(C, WITH("\"seed\":0.5"), 400, "seed", "invalid_type");
    refused(C, WITH("\"stop\":5"), 400, "stop", "invalid_type");
    refused(C, WITH("\"stop\":[\"a\",7]"), 400, "stop[1]", "invalid_type");
    refused(C,
            WITH("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\","
                 "\"n\",\"o\",\"p\",\"q\"]"),
            400, "stop", "invalid_value");
    refused(C, WITH("\"stop\":\"\xff\xfe\""), 400, "stop", "invalid_value");
    refused(C, WITH("\"stream\":\"yes\""), 400, "stream", "invalid_type");
    refused(C, WITH("\"stream_options\":true"), 400, "stream_options", "invalid_type");
    refused(C, WITH("\"chat_template_kwargs\":{\"enable_thinking\":1}"), 400,
            "chat_template_kwargs.enable_thinking", "invalid_type");
    refused(P, "{}", 400, "prompt", "missing_required_parameter");
    refused(P, "{\"prompt\":7}", 400, "prompt", "invalid_type");
    refused(P, "{\"prompt\":[]}", 400, "prompt", "invalid_value");
    refused(P, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt", "unsupported_parameter");
    refused(P, "{\"prompt\":[1,-2]}", 400, "prompt[1]", "invalid_value");
    refused(P, "{\"prompt\":[1,\"x\"]}", 400, "prompt[1]", "invalid_type");
    refused(P, "{\"prompt\":\"x\",\"echo\":true}", 400, "echo", "unsupported_parameter");
    refused(P, "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of", "unsupported_parameter");
    refused(P, "{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix", "unsupported_parameter");
    refused(P, "{\"prompt\":\"x\",\"logprobs\":21}", 400, "logprobs", "invalid_value");
    refused(P, "{\"prompt\":\"x\",\"logprobs\":true}", 400, "logprobs", "invalid_type");
    refused(P, "{\"prompt\":\"x\",\"top_logprobs\":2}", 400, "top_logprobs", "invalid_value");
#undef WITH
    /* deep nesting stays within cJSON's limit and is refused, not a stack overflow */
    size_t n = 200000;
    char *deep = malloc(n + 1);
    memset(deep, '[', n);
    deep[n] = 0;
    refused(C, deep, 400, "", "invalid_json");
    free(deep);
}

/* The text of a JSON document's path, checked to parse. */
static cJSON *parse_json(const char *s, size_t n) {
    cJSON *j = cJSON_ParseWithLength(s, n);
    if (!j) fail_msg("not JSON: %.*s", (int)n, s);
    return j;
}

static void test_responses(void **state) {
    (void)state;
    const char text[] = "a\"b\\c\n\t\x01\x7f\0z \xc3\xa9";
    ts_text out = {0};
    ts_api_resp rp = {.kind = TS_API_CHAT, .id = "chatcmpl-1", .created = 5, .model = "m\"odel"};
    ts_api_usage u = {3, 4, 1};
    ts_api_delta whole = {.content = text, .n_content = sizeof text - 1};
    const char *stop = "stop", *tool_calls = "tool_calls";
    assert_int_equal(ts_api_response_json(&rp, &whole, &stop, 1, &u, &out), 0);
    cJSON *j = parse_json(out.s, out.n);
    const cJSON *msg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    const char *c = cJSON_GetObjectItem(msg, "content")->valuestring;
    assert_memory_equal(c, text, 9); /* cJSON strings stop at the NUL */
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "m\"odel");
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valueint, 7);
    assert_non_null(strstr(out.s, "\\u0000z"));
    cJSON_Delete(j);

    out.n = 0;
    assert_int_equal(ts_api_chunk_sse(&rp, true, NULL, NULL, NULL, &out), 0);
    assert_int_equal(strncmp(out.s, "data: {", 7), 0);
    assert_int_equal(strcmp(out.s + out.n - 2, "\n\n"), 0);
    j = parse_json(out.s + 6, out.n - 8);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion.chunk");
    cJSON_Delete(j);
    out.n = 0;
    assert_int_equal(ts_api_chunk_sse(&rp, false, NULL, NULL, &u, &out), 0);
    j = parse_json(out.s + 6, out.n - 8);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 0);
    cJSON_Delete(j);

    /* reasoning and tool calls: content null when empty, calls with ids; chunks index the calls */
    ts_api_call calls[2] = {{"call_a", "f", "{\"x\":1}"}, {"call_b", "g", "{}"}};
    ts_api_delta d = {.content = "", .reasoning = "why", .n_reasoning = 3, .calls = calls, .n_calls = 2};
    out.n = 0;
    assert_int_equal(ts_api_response_json(&rp, &d, &tool_calls, 1, &u, &out), 0);
    j = parse_json(out.s, out.n);
    msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
    assert_string_equal(cJSON_GetObjectItem(msg, "reasoning_content")->valuestring, "why");
    const cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 1);
    assert_string_equal(cJSON_GetObjectItem(tc, "id")->valuestring, "call_b");
    assert_string_equal(cJSON_GetObjectItem(tc, "type")->valuestring, "function");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(tc, "function"), "name")->valuestring, "g");
    cJSON_Delete(j);
    d.first_index = 3, d.n_reasoning = 0;
    out.n = 0;
    assert_int_equal(ts_api_chunk_sse(&rp, false, &d, NULL, NULL, &out), 0);
    j = parse_json(out.s + 6, out.n - 8);
    const cJSON *delta =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "delta");
    assert_null(cJSON_GetObjectItem(delta, "content"));
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(delta, "tool_calls"), 1), "index")
            ->valueint,
        4);
    cJSON_Delete(j);

    ts_api_error e;
    ts_api_fail(&e, 400, "invalid_request_error", NULL, NULL, "bad \"thing\"");
    out.n = 0;
    assert_int_equal(ts_api_error_json(&e, &out), 0);
    j = parse_json(out.s, out.n);
    const cJSON *err = cJSON_GetObjectItem(j, "error");
    assert_string_equal(cJSON_GetObjectItem(err, "message")->valuestring, "bad \"thing\"");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(err, "param")) &&
                cJSON_IsNull(cJSON_GetObjectItem(err, "code")));
    assert_string_equal(cJSON_GetObjectItem(err, "type")->valuestring, "invalid_request_error");
    cJSON_Delete(j);
    ts_text_free(&out);
}

/* ---- slot file names (llama.cpp's fs_validate_filename) ------------------------------------- */

static void test_slot_filenames(void **state) {
    (void)state;
    static const char *ok[] = {"a",
                               "slot-0.bin",
                               "a.b.c",
                               ".hidden",
                               "\xc3\x84rger \xe6\x97\xa5.bin",
                               "\xf0\x9f\x99\x82",
                               "a b",
                               "x~y_z+1=2,3;4'5[6]7{8}9@#$%&!"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (ts_api_filename_problem(ok[i], strlen(ok[i])))
            fail_msg("refused '%s': %s", ok[i], ts_api_filename_problem(ok[i], strlen(ok[i])));
    static const char *bad[] = {"",
                                ".",
                                "..",
                                "../a",
                                "a/b",
                                "a\\b",
                                "/a",
                                "a..b",
                                " a",
                                "a ",
                                "a.",
                                "a:b",
                                "a*b",
                                "a?b",
                                "a\"b",
                                "a<b",
                                "a>b",
                                "a|b",
                                "a\tb",
                                "a\x7f",
                                "\xc2\x85", /* C1 NEL */
                                "\xe2\x88\x95",
                                "\xe2\x88\x96", /* U+2215, U+2216 */
                                "\xef\xbc\x8e",
                                "\xef\xbf\xbd",
                                "\xef\xbb\xbf", /* U+FF0E, U+FFFD, U+FEFF */
                                "\xc0\xaf",     /* an overlong '/' */
                                "\xe0\x80\xae",
                                "\xed\xa0\x80",
                                "\xf4\x90\x80\x80", /* overlong, surrogate, > U+10FFFF */
                                "\xff",
                                "a\xc3",
                                "\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (!ts_api_filename_problem(bad[i], strlen(bad[i])))
            fail_msg("accepted bad name #%zu '%s'", i, bad[i]);
    char name[300];
    memset(name, 'x', sizeof name);
    assert_null(ts_api_filename_problem(name, 255));
    assert_non_null(ts_api_filename_problem(name, 256));
    assert_non_null(ts_api_filename_problem("a\0b", 3)); /* a NUL inside */

    /* the body: {"filename"}; \u0000 would cut the name short in cJSON, so it is refused */
    char *f = NULL;
    ts_api_error e;
    const char *good = "{\"filename\": \"s.bin\"}";
    assert_int_equal(ts_api_parse_slot_file(good, strlen(good), 0, &f, &e), 0);
    assert_string_equal(f, "s.bin");
    free(f);
    static const char *refusals[] = {"{}",
                                     "{\"filename\": 1}",
                                     "{\"filename\": \"a/b\"}",
                                     "{\"filename\": \"a\\u0000b\"}",
                                     "{\"filename\": \"a\\u002fb\"}",
                                     "{\"filename\": null}"};
    for (size_t i = 0; i < sizeof refusals / sizeof *refusals; i++) {
        f = NULL;
        if (ts_api_parse_slot_file(refusals[i], strlen(refusals[i]), 0, &f, &e) == 0)
            fail_msg("accepted %s", refusals[i]);
        assert_null(f);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, "filename");
    }
    const char *escaped =
        "{\"filename\": \"a\\\\u0000b\"}"; /* a backslash, then "u0000": a bad name, not a NUL */
    assert_int_equal(ts_api_parse_slot_file(escaped, strlen(escaped), 0, &f, &e), -1);
    assert_string_equal(e.param, "filename");
    assert_non_null(strstr(e.message, "path separator"));
}

/* ---- ts_textgen on the demo tokenizer ------------------------------------------------------- */

static ts_tokenizer *g_tok;
static ts_gguf *g_gguf;

static bool utf8_ok(const char *s, size_t n) {
    ts_text t = {0};
    long bad = ts_utf8_sanitize(s, n, &t);
    ts_text_free(&t);
    return bad == 0;
}

static uint64_t g_rng = 88172645463325252ULL;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)g_rng;
}

/* Pushes the ids of `text`, checking the release invariants; returns 1 if a stop string ended it. */
static int run_textgen(const char *text, const char *const *stops, int n_stops, ts_text *out) {
    char err[256];
    ts_tokens ids = {0};
    if (ts_tokenize(g_tok, text, strlen(text), false, &ids, err, sizeof err)) fail_msg("%s", err);
    ts_textgen g;
    out->n = 0;
    ts_textgen_init(&g, g_tok, stops, n_stops, out);
    char *released = calloc(1, strlen(text) * 4 + 16);
    size_t n_rel = 0;
    int stopped = 0;
    for (size_t i = 0; i < ids.n && !stopped; i++) {
        int r = ts_textgen_push(&g, ids.ids[i], err, sizeof err);
        assert_true(r >= 0);
        stopped = r == 1;
        size_t safe = ts_textgen_safe(&g);
        assert_true(safe >= n_rel && safe <= out->n);
        assert_memory_equal(out->s, released, n_rel); /* released bytes never change */
        memcpy(released + n_rel, out->s + n_rel, safe - n_rel);
        n_rel = safe;
        assert_true(utf8_ok(released, n_rel));
        for (int k = 0; k < n_stops && !stopped;
             k++) /* a stop string that may still complete is not released */
            for (size_t m = 1; m < strlen(stops[k]); m++)
                if (m <= out->n && !memcmp(out->s + out->n - m, stops[k], m) && out->n - m < n_rel)
                    fail_msg("released '%.*s' holds the start of stop '%s' (text '%s')", (int)n_rel, released,
                             stops[k], text);
    }
    assert_int_equal(ts_textgen_finish(&g), 0);
    assert_int_equal(ts_textgen_safe(&g), out->n);
    free(released);
    ts_tokens_free(&ids);
    return stopped;
}

static void test_textgen_stops(void **state) {
    (void)state;
    ts_text out = {0};
    const char *text =
        "And God said, Let there be light: and there was light. \xc3\xa9t\xc3\xa9 \xe2\x80\x94 done";
    assert_int_equal(run_textgen(text, NULL, 0, &out), 0);
    assert_int_equal(out.n, strlen(text));
    assert_memory_equal(out.s, text, out.n);
    const char *s1[] = {"light", ","};
    assert_int_equal(run_textgen(text, s1, 2, &out), 1);
    assert_int_equal(out.n, strlen("And God said")); /* the earliest match wins, whatever the order */
    const char *s2[] = {"there was l"};
    assert_int_equal(run_textgen(text, s2, 1, &out), 1);
    assert_int_equal(out.n, strlen("And God said, Let there be light: and "));
    const char *s3[] = {"\xc3\xa9t\xc3\xa9", "zzz"};
    assert_int_equal(run_textgen(text, s3, 2, &out), 1);
    assert_int_equal(out.n, strlen("And God said, Let there be light: and there was light. "));
    const char *s4[] = {"lights", "donE"}; /* near misses: everything comes out */
    assert_int_equal(run_textgen(text, s4, 2, &out), 0);
    assert_int_equal(out.n, strlen(text));
    /* random texts and stop strings cut out of them */
    const char *alpha[] = {
        "a", "b", " ", "\n", "ab", "\xc3\xa9", "\xe2\x80\x94", "LORD", ",", "\xf0\x9f\x99\x82"};
    for (int it = 0; it < 300; it++) {
        char t[400] = "";
        int len = 1 + (int)(rnd() % 60);
        for (int i = 0; i < len; i++) strcat(t, alpha[rnd() % 10]);
        char st[3][32];
        const char *stops[3];
        int ns = (int)(rnd() % 4);
        for (int k = 0; k < ns; k++) {
            size_t L = strlen(t), a = rnd() % L, m = 1 + rnd() % 6;
            if (a + m > L) m = L - a;
            while (a > 0 && ((unsigned char)t[a] & 0xC0) == 0x80) a--; /* start on a character */
            memcpy(st[k], t + a, m);
            st[k][m] = 0;
            size_t e = m;
            while (e > 0 && !utf8_ok(st[k], e)) e--; /* end on a character */
            st[k][e] = 0;
            if (!e) strcpy(st[k], "a");
            stops[k] = st[k];
        }
        int stopped = run_textgen(t, stops, ns, &out);
        /* Occurrences of the stop strings in the whole text. Generation stops in the push that
         * completes the first of them (the one ending first, at E); the cut is then at the start
         * of some occurrence, no earlier than the first start and no later than that one's. */
        size_t first_start = SIZE_MAX, e_end = SIZE_MAX, e_start = 0;
        for (int k = 0; k < ns; k++)
            for (const char *h = strstr(t, stops[k]); h; h = strstr(h + 1, stops[k])) {
                size_t a = (size_t)(h - t), b = a + strlen(stops[k]);
                if (a < first_start) first_start = a;
                if (b < e_end || (b == e_end && a < e_start)) e_end = b, e_start = a;
            }
        assert_memory_equal(out.s, t, out.n);
        if (first_start == SIZE_MAX) {
            assert_false(stopped);
            assert_int_equal(out.n, strlen(t));
            continue;
        }
        assert_true(stopped);
        bool at_stop = false;
        for (int k = 0; k < ns; k++) at_stop |= !strncmp(t + out.n, stops[k], strlen(stops[k]));
        if (!at_stop || out.n < first_start || out.n > e_start)
            fail_msg(
                "text [%s], stops [%s] [%s] [%s]: cut at %zu (first start %zu, first to end starts at %zu)",
                t, stops[0], ns > 1 ? stops[1] : "", ns > 2 ? stops[2] : "", out.n, first_start, e_start);
    }
    ts_text_free(&out);
}

/* The demo model's tokenizer, written from its Hugging Face folder (models/demo) into a temporary
 * GGUF the way convert does (the demo GGUF itself is built on first use, not committed). */
static int setup(void **state) {
    (void)state;
    g_def = ts_sampler_default_params();
    const char *fx = getenv("TS_FIXTURES");
    char dir[4096], path[] = "/tmp/ts_test_server_XXXXXX", err[512];
    snprintf(dir, sizeof dir, "%s/../../models/demo", fx ? fx : "tests/fixtures");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    ts_gguf_writer *w = ts_gguf_writer_new(32, err, sizeof err);
    int rc = !w || ts_tokenizer_write_gguf(w, dir, 4160, err, sizeof err) ||
             ts_gguf_writer_begin_data(w, path) || ts_gguf_writer_finish(w);
    ts_gguf_writer_free(w);
    if (!rc)
        rc = ts_gguf_open(path, &g_gguf, err, sizeof err) ||
             ts_tokenizer_load(g_gguf, &g_tok, err, sizeof err);
    unlink(path);
    if (rc) fprintf(stderr, "the demo tokenizer from %s: %s\n", dir, err);
    return rc ? -1 : 0;
}

/* Error messages echo client bytes: never cut inside a character, always valid UTF-8 JSON. */
static void test_error_utf8(void **state) {
    (void)state;
    char buf[16];
    assert_string_equal(ts_api_clip("abc", 8, buf, sizeof buf), "abc");
    assert_string_equal(ts_api_clip("abcdefghij", 4, buf, sizeof buf), "abcd...");
    assert_string_equal(ts_api_clip("ab\xc3\xa9z", 3, buf, sizeof buf), "ab..."); /* é not split */
    assert_string_equal(ts_api_clip("a\xe2\x82\xac\xe2\x82\xac", 5, buf, sizeof buf),
                        "a\xe2\x82\xac..."); /* € */
    assert_string_equal(ts_api_clip("\xf0\x9f\x98\x80x", 2, buf, sizeof buf), "...");
    ts_api_request r;
    ts_api_error e;
    char body[400]; /* a role of 40 two-byte characters: echoed clipped at a character */
    int n = snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"");
    for (int i = 0; i < 40; i++) n += snprintf(body + n, sizeof body - (size_t)n, "\xc3\xa9");
    snprintf(body + n, sizeof body - (size_t)n, "\",\"content\":\"x\"}]}");
    assert_int_equal(parse(TS_API_CHAT, body, &r, &e), -1);
    assert_string_equal(e.param, "messages[0].role");
    ts_text out = {0};
    assert_int_equal(ts_api_error_json(&e, &out), 0);
    ts_text clean = {0};
    assert_int_equal(ts_utf8_sanitize(out.s, out.n, &clean), 0); /* valid UTF-8 */
    cJSON_Delete(parse_json(out.s, out.n));
    ts_text_free(&out), ts_text_free(&clean);
    /* an invalid byte in a body is refused before anything echoes it (ts_json_check) ... */
    body[22] = (char)0xff;
    assert_int_equal(parse(TS_API_CHAT, body, &r, &e), -1);
    assert_string_equal(e.param, "messages[0].role");
    assert_non_null(strstr(e.message, "not valid UTF-8 (byte 22)"));
    /* ... and a message holding one anyway is written with U+FFFD */
    ts_api_fail(&e, 400, "t", NULL, NULL, "role '%s'", "\xff\xc3");
    assert_int_equal(ts_api_error_json(&e, &out), 0);
    assert_int_equal(ts_utf8_sanitize(out.s, out.n, &clean), 0);
    assert_non_null(strstr(out.s, "\xef\xbf\xbd")); /* U+FFFD for the 0xff byte */
    ts_text_free(&out), ts_text_free(&clean);
    /* a message cut at its 512-byte end is cut at a character boundary */
    ts_api_fail(&e, 400, "t", NULL, NULL, "%s", "");
    char big[700];
    memset(big, 'a', 509), memcpy(big + 509, "\xe2\x82\xac\xe2\x82\xac", 6), big[515] = 0;
    ts_api_fail(&e, 400, "t", NULL, NULL, "%s", big);
    assert_int_equal(strlen(e.message), 509);
    /* JSON values are counted before any tree is built */
    char ids[64 * 1024];
    n = snprintf(ids, sizeof ids, "{\"prompt\":[");
    for (int i = 0; i < 20000; i++) n += snprintf(ids + n, sizeof ids - (size_t)n, "%s1", i ? "," : "");
    snprintf(ids + n, sizeof ids - (size_t)n, "]}");
    assert_int_equal(ts_api_parse(TS_API_COMPLETION, ids, strlen(ids), &g_def, 10000, &r, &e), -1);
    assert_int_equal(e.status, 413);
    assert_int_equal(ts_api_parse(TS_API_COMPLETION, ids, strlen(ids), &g_def, 30000, &r, &e), 0);
    assert_int_equal(r.prompt_ids.n, 20000);
    ts_api_request_free(&r);
}

static int teardown(void **state) {
    (void)state;
    ts_tokenizer_free(g_tok);
    ts_gguf_close(g_gguf);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields),        cmocka_unit_test(test_tool_fields),
        cmocka_unit_test(test_completion_prompts), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_nul_fields),         cmocka_unit_test(test_responses),
        cmocka_unit_test(test_textgen_stops),      cmocka_unit_test(test_error_utf8),
        cmocka_unit_test(test_slot_filenames),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
