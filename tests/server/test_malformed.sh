#!/usr/bin/env bash
# Bad input never hurts the server: malformed JSON, wrong types, unsupported features refused by
# name, oversized bodies, prompts past the context, unknown routes and methods, broken HTTP, idle
# connections, API keys, overload, clients that vanish, and SIGTERM / SIGINT with requests in
# flight. Every refusal is the right status with an OpenAI error object
# {"error": {"message", "type", "param", "code"}}, and the server answers the next request.
source "$(dirname "$0")/lib.sh"
T="$TS_TMP"
J=(-H "Content-Type: application/json") # POST bodies must be declared JSON (415 otherwise: see test_abuse.sh)
C=(curl -s -m 30 "${J[@]}")

# check_error FILE CODE PARAM: FILE holds an OpenAI error object with this code and param ("-": any; "null").
check_error() {
  "$PY" - "$@" <<'EOF'
import json, sys
path, code, param = sys.argv[1:4]
try:
    d = json.load(open(path, 'rb'))
    e = d['error']
    assert set(e) == {'message', 'type', 'param', 'code'}, f'keys {sorted(e)}'
    assert isinstance(e['message'], str) and len(e['message']) > 5, 'no message'
    assert isinstance(e['type'], str), 'no type'
    if code != '-': assert e['code'] == code, f"code {e['code']!r}, expected {code!r}"
    if param != '-': assert e['param'] == (None if param == 'null' else param), f"param {e['param']!r}, expected {param!r}"
except Exception as x:
    print(f'{x}: {open(path, "rb").read()[:300]!r}')
    sys.exit(1)
EOF
}

# expect STATUS CODE PARAM CURL-ARGS...: the request gets STATUS and (for 4xx/5xx) an error object.
expect() {
  local status=$1 code=$2 param=$3
  shift 3
  local got
  got=$("${C[@]}" -o "$T/body" -w '%{http_code}' "$@")
  if [ "$got" != "$status" ]; then
    bad "${*: -3} -> HTTP $got, expected $status: $(head -c 300 "$T/body")"
    return
  fi
  if [ "$status" -ge 400 ]; then
    local why
    why=$(check_error "$T/body" "$code" "$param") || bad "${*: -3}: $why"
  fi
}

alive() {
  local got
  got=$("${C[@]}" -o /dev/null -w '%{http_code}' "$SV_URL/health")
  [ "$got" = 200 ] || bad "the server stopped answering after $1 (health: $got)"
  kill -0 "$SV_PID" 2>/dev/null || { bad "the server died after $1"; cat "$SV_LOG"; exit 1; }
}

# expect_post STATUS CODE PARAM PATH BODY: POST a JSON body.
expect_post() {
  printf '%s' "$5" >"$T/req.json"
  expect "$1" "$2" "$3" -H "Content-Type: application/json" --data-binary "@$T/req.json" "$SV_URL$4"
}

sv_start -np 2 -c 1024 --max-body 65536
CH=/v1/chat/completions
CO=/v1/completions
U='"messages":[{"role":"user","content":"hi"}]'

# ---- malformed JSON -------------------------------------------------------------------------
for body in '' '{' '{"messages":[}' '{"messages":[{"role":"user","content":"hi"}]} trailing' "{'single':1}" \
            '{"a":1,}' '{"messages":[{"role":"user","content":"hi\x"}]}' '{"messages": tru}'; do
  expect_post 400 invalid_json null $CH "$body"
done
printf '{"prompt":"a\0b"}' >"$T/nul.json"
expect 400 invalid_json null --data-binary @"$T/nul.json" "$SV_URL$CO"
head -c 5000 /dev/zero | tr '\0' '[' >"$T/deep.json" # past cJSON's nesting limit (1000)
expect 400 invalid_json null --data-binary @"$T/deep.json" "$SV_URL$CH"
head -c 60000 /dev/zero | tr '\0' '[' >"$T/deep.json" # past the value count (8 per token of context + 4096)
expect 413 request_too_large null --data-binary @"$T/deep.json" "$SV_URL$CH"
expect_post 400 invalid_type null $CH '[1,2,3]'
expect_post 400 invalid_type null $CH '"a string"'
expect_post 400 invalid_type null $CH 'null'
alive "malformed JSON"

# ---- wrong types and values -----------------------------------------------------------------
while IFS='|' read -r code param body; do
  expect_post 400 "$code" "$param" $CH "$body"
done <<EOF
invalid_type|messages|{"messages":"hello"}
missing_required_parameter|messages|{"model":"demo.gguf"}
invalid_type|messages[0].content|{"messages":[{"role":"user","content":42}]}
invalid_value|messages[0].role|{"messages":[{"role":"wizard","content":"x"}]}
invalid_type|max_tokens|{$U,"max_tokens":"10"}
invalid_type|max_tokens|{$U,"max_tokens":2.5}
invalid_value|max_tokens|{$U,"max_tokens":0}
invalid_value|max_tokens|{$U,"max_tokens":1e999}
invalid_type|stream|{$U,"stream":"yes"}
invalid_type|stop|{$U,"stop":5}
invalid_type|stop[0]|{$U,"stop":[null]}
invalid_type|temperature|{$U,"temperature":[]}
invalid_value|temperature|{$U,"temperature":-1}
invalid_value|top_p|{$U,"top_p":7}
invalid_type|seed|{$U,"seed":"x"}
invalid_type|model|{$U,"model":5}
invalid_value|messages[0].tool_calls[0]|{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}]}
invalid_value|response_format.json_schema.schema|{$U,"response_format":{"type":"json_schema","json_schema":{}}}
invalid_value|tools[0]|{$U,"tools":[{"type":"function"}]}
invalid_value|tool_choice|{$U,"tool_choice":"required"}
invalid_schema|response_format|{$U,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"a+"}}}}
invalid_grammar|grammar|{$U,"grammar":"root ::= root \\"a\\""}
invalid_type|grammar|{$U,"grammar":["root ::= [a]"]}
invalid_schema|tool_choice|{$U,"tools":[{"type":"function","function":{"name":"f","parameters":{"\$ref":"#/x"}}}],"tool_choice":"required"}
EOF
alive "wrong types"

# ---- fields that matter but are not supported: refused by name -------------------------------
while IFS='|' read -r path param body; do
  expect_post 400 unsupported_parameter "$param" "$path" "$body"
done <<EOF
$CH|n|{$U,"n":17}
$CH|logit_bias|{$U,"logit_bias":{"11":5}}
$CH|audio|{$U,"audio":{"voice":"alloy","format":"wav"}}
$CH|modalities|{$U,"modalities":["text","audio"]}
$CH|functions|{$U,"functions":[{"name":"f"}]}
$CO|tools|{"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]}
$CO|echo|{"prompt":"x","echo":true}
$CO|best_of|{"prompt":"x","best_of":2}
$CO|prompt|{"prompt":["a","b"]}
$CO|n|{"prompt":"x","n":99}
EOF
for part in '{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}' '{"type":"input_audio","input_audio":{"data":"AA","format":"wav"}}' \
            '{"type":"video_url","video_url":{"url":"x"}}' '{"type":"file","file":{"file_id":"f"}}'; do
  expect_post 400 unsupported_content_type "messages[0].content[1].type" $CH \
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is this?\"},$part]}]}"
  grep -q "text model only" "$T/body" || bad "a media part is not refused by name: $(cat "$T/body")"
done
alive "unsupported fields"

# ---- limits ---------------------------------------------------------------------------------
long=$(printf 'word %.0s' $(seq 1500))
expect_post 400 context_length_exceeded prompt $CO "{\"prompt\":\"$long\"}"
expect_post 400 context_length_exceeded max_tokens $CO '{"prompt":"And the LORD said","max_tokens":5000}'
expect_post 400 invalid_value prompt $CO '{"prompt":""}'
expect_post 400 invalid_value prompt $CO '{"prompt":[1,2,99999]}'
head -c 70000 /dev/zero | tr '\0' ' ' >"$T/big.json"
expect 413 request_too_large null --data-binary @"$T/big.json" "$SV_URL$CH"
expect 413 request_too_large null -H 'Transfer-Encoding: chunked' --data-binary @"$T/big.json" "$SV_URL$CH"
# invalid UTF-8 in a string is refused by the field's name, not replaced (JSON text is UTF-8;
# ts_json_check in include/turbospark.h); the error body stays valid UTF-8 JSON
printf '{"prompt":"And \xff\xfe the LORD \xc3","max_tokens":4,"temperature":0}' >"$T/utf8.json"
expect 400 invalid_value prompt --data-binary @"$T/utf8.json" "$SV_URL$CO"
"$PY" -c "import json,sys; json.load(open('$T/body'))" || bad "invalid UTF-8 in: the answer is not JSON"
alive "limits"

# ---- routes and methods ---------------------------------------------------------------------
expect 404 unknown_url null "$SV_URL/v1/nope"
expect 404 unknown_url null "$SV_URL/"
expect 404 unknown_url null -X POST -d '{}' "$SV_URL/v1/embeddings"
expect 404 model_not_found model "$SV_URL/v1/models/gpt-4"
expect 405 method_not_allowed null "$SV_URL$CH"
expect 405 method_not_allowed null -X POST -d '{}' "$SV_URL/health"
expect 405 method_not_allowed null -X DELETE "$SV_URL/v1/models"
"${C[@]}" -D "$T/head" -o /dev/null "$SV_URL$CH"
grep -qi '^allow: POST' "$T/head" || bad "405 without an Allow header"
alive "routes"

# ---- broken HTTP and idle connections -------------------------------------------------------
port=${SV_URL##*:}
for junk in 'GARBAGE\r\n\r\n' 'GET / HTTP/9.9\r\n\r\n' 'POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n' \
            'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"pro'; do
  timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; printf '$junk' >&3; timeout 1 cat <&3 >/dev/null; exec 3>&-" 2>/dev/null
done
idle=()
for _ in $(seq 20); do (exec 3<>"/dev/tcp/127.0.0.1/$port"; sleep 8) 2>/dev/null & idle+=($!); done
sleep 0.3
alive "broken HTTP and 20 idle connections"
kill "${idle[@]}" 2>/dev/null
wait "${idle[@]}" 2>/dev/null

# ---- clients that vanish: their slots are freed at once ------------------------------------
# (they leave after 0.25 s: 1,000 tokens, as many as the context of 1,024 allows, take ~0.4 s alone on a fast
# machine, and a client still there at the end is not cancelled)
metric() { "${C[@]}" "$SV_URL/metrics" | sed -n "s/^$1 //p"; }
c0=$(metric 'turbospark_requests_total{finish_reason="cancelled"}')
pids=()
for i in $(seq 6); do
  s=$([ $((i % 2)) = 0 ] && echo true || echo false)
  curl -s "${J[@]}" -m 0.25 -o /dev/null -d "{\"prompt\":\"And\",\"max_tokens\":1000,\"ignore_eos\":true,\"stream\":$s}" "$SV_URL$CO" & pids+=($!)
done
wait "${pids[@]}"
for _ in $(seq 200); do # a cancel takes effect at the next step: at most one step after the client left
  c1=$(metric 'turbospark_requests_total{finish_reason="cancelled"}')
  [ "$((c1 - c0))" -ge 6 ] && [ "$(metric turbospark_slots_busy)" = 0 ] && [ "$(metric turbospark_queue_depth)" = 0 ] && break
  sleep 0.05
done
[ "$((c1 - c0))" -eq 6 ] || bad "6 vanished clients, $((c1 - c0)) cancellations"
[ "$(metric turbospark_slots_busy)" = 0 ] && [ "$(metric turbospark_queue_depth)" = 0 ] || bad "slots still busy after the clients left"
alive "vanished clients"
sv_stop

# ---- API keys -------------------------------------------------------------------------------
printf 'sekret-%s\n' "$RANDOM" >"$T/key"
key=$(head -1 "$T/key")
sv_start -np 1 --api-key-file "$T/key"
expect 401 invalid_api_key null "$SV_URL/v1/models"
expect 401 invalid_api_key null -H "Authorization: Bearer wrong" "$SV_URL/v1/models"
expect 401 invalid_api_key null -H "Authorization: Bearer ${key}x" "$SV_URL/v1/models"
expect 401 invalid_api_key null -H "Authorization: Basic $key" "$SV_URL/v1/models"
expect 401 invalid_api_key null -H "Authorization: Bearer wrong" -d '{"prompt":"x"}' "$SV_URL$CO"
expect 401 invalid_api_key null "$SV_URL/metrics"
expect 200 - - -H "Authorization: Bearer $key" "$SV_URL/v1/models"
expect 200 - - -H "Authorization: Bearer $key" -d '{"prompt":"And","max_tokens":2}' "$SV_URL$CO"
expect 200 - - "$SV_URL/health"
alive "API keys"
sv_stop

# ---- overload: a full queue answers 503 with Retry-After -------------------------------------
# (1,000 tokens keep the first request running ~0.4 s on a fast machine, long past the fourth's arrival at
# 0.15 s; 200 took 75 ms, and then the slot could be free again before the third came)
sv_start -np 1 --max-queue 1
pids=()
for i in 1 2 3 4; do
  curl -s "${J[@]}" -m 120 -D "$T/h$i" -o "$T/o$i" -w '%{http_code}\n' -d '{"prompt":"And","max_tokens":1000,"ignore_eos":true}' "$SV_URL$CO" >"$T/s$i" & pids+=($!)
  sleep 0.05
done
wait "${pids[@]}"
n503=$(cat "$T"/s[1-4] | grep -c 503)
n200=$(cat "$T"/s[1-4] | grep -c 200)
[ "$n503" -ge 1 ] && [ "$((n503 + n200))" -eq 4 ] || bad "overload: statuses $(cat "$T"/s[1-4] | tr '\n' ' ')"
for i in 1 2 3 4; do
  if grep -q 503 "$T/s$i"; then
    check_error "$T/o$i" server_busy null >/dev/null || bad "503 body: $(cat "$T/o$i")"
    grep -qi '^retry-after:' "$T/h$i" || bad "503 without Retry-After"
  fi
done
alive "overload"
sv_stop

# ---- SIGTERM finishes what runs; a second signal cancels --------------------------------------
sv_start -np 1 --drain 120
curl -s "${J[@]}" -m 150 -o "$T/drain1" -w '%{http_code}' -d '{"prompt":"And","max_tokens":1500,"ignore_eos":true}' "$SV_URL$CO" >"$T/drain1.s" &
p1=$!
wait_health() { # wait_health PATTERN: poll /health (up to 10 s)
  for _ in $(seq 500); do "${C[@]}" "$SV_URL/health" | grep -q "$1" && return 0; sleep 0.02; done
  bad "/health never showed $1"
}
wait_health '"slots_processing":1'
"${C[@]}" -o "$T/drain2" -w '%{http_code}' -d '{"prompt":"And","max_tokens":5,"ignore_eos":true}' "$SV_URL$CO" >"$T/drain2.s" &
p2=$!
wait_health '"queue":1'
sv_stop 150
wait $p1 $p2
[ "$(cat "$T/drain1.s")" = 200 ] && grep -q '"completion_tokens":1500' "$T/drain1" || bad "SIGTERM: the running request was not finished: $(cat "$T/drain1.s") $(head -c 200 "$T/drain1")"
[ "$(cat "$T/drain2.s")" = 503 ] && check_error "$T/drain2" shutting_down null >/dev/null || bad "SIGTERM: the queued request: $(cat "$T/drain2.s") $(cat "$T/drain2")"

sv_start -np 2 --drain 120
curl -s "${J[@]}" -m 60 -o "$T/drain3" -w '%{http_code}' -d '{"prompt":"And","max_tokens":3000,"ignore_eos":true}' "$SV_URL$CO" >"$T/drain3.s" &
p3=$!
curl -s "${J[@]}" -m 60 -N -o "$T/drain4" -d '{"prompt":"And","max_tokens":3000,"ignore_eos":true,"stream":true}' "$SV_URL$CO" &
p4=$!
wait_health '"slots_processing":2'
kill -INT "$SV_PID"
sleep 0.3
sv_stop 20 # a second signal (SIGTERM): cancel now (3000 tokens would take seconds; --drain allows 120)
wait $p3 $p4
[ "$(cat "$T/drain3.s")" = 503 ] && check_error "$T/drain3" shutting_down null >/dev/null || bad "second signal, whole request: $(cat "$T/drain3.s") $(head -c 200 "$T/drain3")"
tail -c 300 "$T/drain4" | grep -q 'shutting_down' && tail -c 20 "$T/drain4" | grep -q 'data: \[DONE\]' || bad "second signal, stream: $(tail -c 300 "$T/drain4")"

[ $fail -eq 0 ] && echo "server malformed requests: ok"
exit $fail
