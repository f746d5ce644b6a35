#!/usr/bin/env bash
# The model file's own chat template is rendered by the Jinja engine, byte for byte as transformers
# renders it (tests/fixtures/templates/cases.json): a demo model converted with Qwen3.5's template
# in its metadata, served as is; --chat-template-file with Qwen3's template; chat_template_kwargs;
# --no-jinja and --chat-template fall back to the built-in renderings; a file template outside the
# engine's subset stops the server with a sentence naming the construct; a model template outside it
# falls back to the built-in rendering with a note in the log. Prompts are read back from POST
# /apply-template and checked against /v1/chat/completions' usage.prompt_tokens.
source "$(dirname "$0")/lib.sh"
T="$TS_TMP"
FX="$TS_REPO/tests/fixtures/templates"

# with_template NAME TEMPLATE_FILE: the demo checkpoint converted with TEMPLATE_FILE as its chat
# template (tokenizer_config.json's chat_template), written to $T/NAME.gguf.
with_template() {
  local d="$T/ckpt_$1"
  rm -rf "$d" && mkdir -p "$d"
  for f in config.json generation_config.json model.safetensors tokenizer.json; do ln -s "$TS_REPO/models/demo/$f" "$d/$f"; done
  "$PY" - "$TS_REPO/models/demo/tokenizer_config.json" "$2" "$d/tokenizer_config.json" <<'PYEOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = open(sys.argv[2]).read()
json.dump(cfg, open(sys.argv[3], "w"))
PYEOF
  "$TS_BIN" convert "$d" -o "$T/$1.gguf" --type bf16 --quiet || bad "convert with the $1 template"
}

# check URL TEMPLATE NAME_IN_PROPS [CASE_FILTER...]: the server renders every case of TEMPLATE
# in cases.json (with add_generation_prompt) as the reference did, and reports NAME_IN_PROPS.
check() {
  "$PY" - "$FX/cases.json" "$@" <<'PYEOF'
import json, sys, urllib.request, urllib.error
cases_path, url, template, name = sys.argv[1:5]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r: return r.status, json.load(r)
    except urllib.error.HTTPError as e: return e.code, json.load(e)
props = json.load(urllib.request.urlopen(url + "/props", timeout=30))
assert props["chat_template_name"] == name, f"props say {props['chat_template_name']!r}, expected {name!r}"
d = json.load(open(cases_path))
n = 0
for c in d["cases"]:
    if c["template"] != template or "expected" not in c or not c["options"].get("add_generation_prompt"): continue
    conv = d["conversations"][c["conversation"]]
    msgs = json.loads(json.dumps(conv["messages"]))
    if any(not isinstance(m.get("content"), str) for m in msgs): continue  # content parts: flattened by the API
    for m in msgs:  # the OpenAI API carries tool-call arguments as JSON text
        for call in m.get("tool_calls", []):
            if not isinstance(call["function"]["arguments"], str):
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"], ensure_ascii=False)
    body = {"messages": msgs}
    if conv.get("tools"): body["tools"] = conv["tools"]
    think = c["options"].get("enable_thinking")
    if think is not None: body["chat_template_kwargs"] = {"enable_thinking": think}
    status, got = post("/apply-template", body)
    assert status == 200, f"{c['conversation']}: {status} {got}"
    if got["prompt"] != c["expected"]:
        sys.exit(f"{template}/{c['conversation']} {c['options']}: the server's prompt differs\n--- got ---\n{got['prompt']}\n--- want ---\n{c['expected']}")
    n += 1
    if n <= 3:  # generation uses the same prompt: its token count is the reference's
        status, r = post("/v1/chat/completions", {**body, "max_tokens": 1, "temperature": 0})
        assert status == 200, r
        status, tk = post("/tokenize", {"content": c["expected"], "parse_special": True})
        assert r["usage"]["prompt_tokens"] == len(tk["tokens"]), (r["usage"], len(tk["tokens"]))
assert n >= 8, f"only {n} cases of {template} were checked"
print(f"{template}: {n} prompts equal to the reference")
PYEOF
}

with_template q35 "$FX/qwen3.5.jinja"
sv_start -np 1 -c 4096 -m "$T/q35.gguf"
check "$SV_URL" qwen3.5 jinja || bad "the model's own Qwen3.5 template (log: $SV_LOG)"
# a request's chat_template_kwargs reach the template as variables
out=$(curl -s -m 30 -H "Content-Type: application/json" "$SV_URL/apply-template" \
  -d '{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"add_vision_id":true,"enable_thinking":false}}')
[ "$out" = '{"prompt":"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"}' ] \
  || bad "chat_template_kwargs: $out"
# the template's own refusals are the client's errors
code=$(curl -s -m 30 -o "$T/err.json" -w '%{http_code}' -H "Content-Type: application/json" "$SV_URL/v1/chat/completions" \
  -d '{"messages":[{"role":"system","content":"only a system prompt"}]}')
[ "$code" = 400 ] && grep -q "No user query found in messages" "$T/err.json" || bad "a template's raise_exception: $code $(cat "$T/err.json")"
sv_stop

sv_start -np 1 -c 4096 --chat-template-file "$FX/qwen3.jinja"
check "$SV_URL" qwen3 jinja || bad "--chat-template-file (log: $SV_LOG)"
sv_stop

sv_start -np 1 -c 4096 -m "$T/q35.gguf" --no-jinja
grep -q "chat template qwen3-thinking" "$SV_LOG" || bad "--no-jinja did not fall back to the built-in template: $(head -3 "$SV_LOG")"
sv_stop
sv_start -np 1 -c 4096 -m "$T/q35.gguf" --chat-template chatml
grep -q "chat template chatml" "$SV_LOG" || bad "--chat-template chatml was not used: $(head -3 "$SV_LOG")"
sv_stop

# every member of chat_template_kwargs is a variable (but cannot replace the messages)
printf '%s' "{{ greeting | default('none') }}:{{ messages[0].content }}{{ '!' if add_generation_prompt }}" >"$T/kw.jinja"
sv_start -np 1 -c 4096 --chat-template-file "$T/kw.jinja"
for kw in '{"greeting":"hey","messages":5,"add_generation_prompt":false}/hey:Hi!' '{}/none:Hi!'; do
  out=$(curl -s -m 30 -H "Content-Type: application/json" "$SV_URL/apply-template" \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"chat_template_kwargs\":${kw%/*}}")
  [ "$out" = "{\"prompt\":\"${kw#*/}\"}" ] || bad "chat_template_kwargs ${kw%/*}: $out"
done
sv_stop

# a template file outside the subset stops the server with a sentence naming the construct
{ cat "$FX/qwen3.jinja"; echo "{{ messages | wordcount }}"; } >"$T/bad.jinja"
"$TS_BIN" serve -m "$TS_MODEL" --port 0 --chat-template-file "$T/bad.jinja" >"$T/bad.log" 2>&1 && bad "a bad template file was accepted"
grep -q "bad.jinja: chat template line [0-9]*: the filter 'wordcount' is not supported" "$T/bad.log" || bad "bad template file: $(cat "$T/bad.log")"
"$TS_BIN" serve -m "$TS_MODEL" --port 0 --chat-template-file "$T/missing.jinja" >"$T/bad.log" 2>&1 && bad "a missing template file was accepted"
grep -q "cannot open the chat template file" "$T/bad.log" || bad "missing template file: $(cat "$T/bad.log")"

# a model template outside the subset: the built-in rendering recognised from it, and a note
with_template odd "$T/bad.jinja"
sv_start -np 1 -c 4096 -m "$T/odd.gguf"
grep -q "note: the model's chat template cannot be rendered by the Jinja engine (.*wordcount.*); using the built-in qwen3 rendering" "$SV_LOG" \
  || bad "no fallback note: $(head -5 "$SV_LOG")"
sv_stop
[ $fail -eq 0 ] && echo "server template: ok"
exit $fail
