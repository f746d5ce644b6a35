#!/usr/bin/env bash
# Bad input to the forward: each gets exit status 1 and one clear sentence, never a crash.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
mkdir -p "$TS_TMP"
cd "$TS_TMP"
"$TS_BIN" synth --tiny --type q8_0 -o tiny.gguf 2>/dev/null || exit 1
$PY - <<'PY'
import numpy as np
np.save("ok.npy", np.arange(20, dtype=np.int32))
np.save("big_id.npy", np.array([1, 2, 512], dtype=np.int32))      # vocab is 512
np.save("neg_id.npy", np.array([1, -3], dtype=np.int32))
np.save("floats.npy", np.ones(4, dtype=np.float32))
np.save("empty.npy", np.zeros(0, dtype=np.int32))
np.save("twod.npy", np.zeros((2, 2), dtype=np.int32))
open("garbage.npy", "wb").write(b"not an npy file at all")
PY
fail=0
expect() { # expect RC SUBSTRING CMD...
  local want=$1 sub=$2; shift 2
  timeout 60 "$@" >out.txt 2>err.txt; local rc=$?
  if [ $rc -ne "$want" ] || ! grep -q -- "$sub" err.txt || grep -q "Sanitizer\|runtime error" err.txt; then
    echo "FAIL: '$*' gave rc=$rc (want $want), stderr: $(cat err.txt)"; fail=1
  fi
}
expect 1 "do not fit a context of 10" "$TS_BIN" logits -m tiny.gguf --tokens-npy ok.npy -o x.npy -c 10
expect 1 "do not fit a context of 25" "$TS_BIN" generate -m tiny.gguf --tokens-npy ok.npy -n 6 -o x.npy -c 25
expect 1 "token id 512 at position 2 is outside the vocabulary" "$TS_BIN" logits -m tiny.gguf --tokens-npy big_id.npy -o x.npy
expect 1 "token id -3 at position 1 is outside the vocabulary" "$TS_BIN" generate -m tiny.gguf --tokens-npy neg_id.npy -n 2 -o x.npy
expect 1 "dtype is '<f4'" "$TS_BIN" logits -m tiny.gguf --tokens-npy floats.npy -o x.npy
expect 1 "non-empty 1-D array" "$TS_BIN" logits -m tiny.gguf --tokens-npy empty.npy -o x.npy
expect 1 "non-empty 1-D array" "$TS_BIN" logits -m tiny.gguf --tokens-npy twod.npy -o x.npy
expect 1 "is not a .npy file" "$TS_BIN" logits -m tiny.gguf --tokens-npy garbage.npy -o x.npy
expect 1 "cannot open" "$TS_BIN" logits -m missing.gguf --tokens-npy ok.npy -o x.npy
expect 1 "is not a GGUF file" "$TS_BIN" logits -m garbage.npy --tokens-npy ok.npy -o x.npy
expect 2 "missing -o" "$TS_BIN" logits -m tiny.gguf --tokens-npy ok.npy
expect 2 "unknown backend 'vulkan'" "$TS_BIN" logits -m tiny.gguf --tokens-npy ok.npy -o x.npy --backend vulkan
expect 2 "random-weights needs --backend cuda" "$TS_BIN" logits -m tiny.gguf --tokens-npy ok.npy -o x.npy --random-weights
if ! "$TS_BIN" devices 2>/dev/null | grep -q "^  0: "; then # no GPU here: a clear refusal, not a crash
  if "$TS_BIN" devices | grep -q "^cuda: not built"; then
    expect 2 "not in this build" "$TS_BIN" logits -m tiny.gguf --tokens-npy ok.npy -o x.npy --backend cuda
  else
    expect 1 "no CUDA device is available" "$TS_BIN" logits -m tiny.gguf --tokens-npy ok.npy -o x.npy --backend cuda
  fi
fi
expect 2 "--ubatch must be" "$TS_BIN" logits -m tiny.gguf --tokens-npy ok.npy -o x.npy --ubatch 0
[ ! -e x.npy ] || { echo "FAIL: a failed run left x.npy behind"; fail=1; }
# and a good run still works, with a model that is quantized
"$TS_BIN" generate -m tiny.gguf --tokens-npy ok.npy -n 5 -o g.npy 2>/dev/null || { echo "FAIL: generate"; fail=1; }
[ $fail -eq 0 ] && echo "forward_errors: ok"
exit $fail
