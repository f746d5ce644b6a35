#!/usr/bin/env bash
# turbospark run --json-schema / --json on the demo model: on every seed the continuation is JSON
# that validates against the schema (checked by a few lines of Python written here, not by the
# engine), and a schema with an unsupported keyword is refused by name.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$TS_TMP"; cd "$TS_TMP"
m="$TS_TMP/demo.gguf"
"$TS_BIN" convert "$repo/models/demo" -o "$m" --type bf16 --quiet || exit 1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
cat > schema.json <<'JSON'
{"type": "object", "properties": {"who": {"enum": ["Seth", "Cain", "Abel"]}, "age": {"type": "integer"},
 "verse": {"type": "string", "maxLength": 30}, "sons": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
 "required": ["who", "age", "verse"], "additionalProperties": false}
JSON
prompt="And Adam begat"
for s in $(seq 1 10); do
  "$TS_BIN" run -m "$m" -p "$prompt" -n 300 --temp 1 -s "$s" --json-schema schema.json >out.txt 2>err.txt || { bad "seed $s: $(cat err.txt)"; continue; }
  grep -q "stopped by end of generation" err.txt || bad "seed $s did not end the JSON: $(cat err.txt)"
  "$PY" - "$prompt" out.txt <<'PY' || bad "seed $s: $(cat out.txt)"
import json, sys
text = open(sys.argv[2]).read()
assert text.startswith(sys.argv[1])
v = json.loads(text[len(sys.argv[1]):])
assert set(v) <= {"who", "age", "verse", "sons"} and {"who", "age", "verse"} <= set(v), v
assert v["who"] in ("Seth", "Cain", "Abel") and type(v["age"]) is int
assert type(v["verse"]) is str and len(v["verse"]) <= 30
assert type(v.get("sons", [])) is list and len(v.get("sons", [])) <= 2 and all(type(b) is bool for b in v.get("sons", []))
PY
done
"$TS_BIN" run -m "$m" -p "$prompt" -n 100 --temp 0.8 -s 4 --json >out.txt 2>err.txt || bad "--json: $(cat err.txt)"
if grep -q "stopped by end of generation" err.txt; then
  "$PY" -c "import json,sys; t=open('out.txt').read(); assert type(json.loads(t[len(sys.argv[1]):])) is dict" "$prompt" || bad "--json: $(cat out.txt)"
fi
echo '{"type": "string", "pattern": "^a"}' > pattern.json
"$TS_BIN" run -m "$m" -p x --json-schema pattern.json >/dev/null 2>err.txt; [ $? -eq 1 ] && grep -q "'pattern'" err.txt || bad "pattern not refused by name: $(cat err.txt)"
# a GBNF grammar file
printf 'root ::= ("Yea" | "Nay") ", " name "."\nname ::= [A-Z] [a-z]{1,8}\n' > g.gbnf
for s in 1 2 3; do
  out=$("$TS_BIN" run -m "$m" -p "$prompt" -n 40 --temp 1 -s "$s" --grammar-file g.gbnf 2>err.txt) || bad "grammar seed $s: $(cat err.txt)"
  [[ "${out#"$prompt"}" =~ ^(Yea|Nay),\ [A-Z][a-z]{1,8}\.$'\n'?$ ]] || bad "grammar seed $s wrote: $out"
done
printf 'root ::= root "a"\n' > left.gbnf
"$TS_BIN" run -m "$m" -p x --grammar-file left.gbnf >/dev/null 2>err.txt; [ $? -eq 1 ] && grep -q "left-recursive" err.txt || bad "left recursion not refused: $(cat err.txt)"
[ $fail -eq 0 ] && echo "json schema: ok"
exit $fail
