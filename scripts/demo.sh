#!/usr/bin/env bash
# make demo: generate text on the CPU with the bundled demo model (models/demo: a small qwen4_exp
# trained on the King James Bible — PLE, sparse QSA, MoE and hyper-connections all active; see
# tools/demo/README.md), then show what the loader sees in it. The GGUF is converted from the
# committed checkpoint on first use (about a second), see docs/DECISIONS.md for why it is not committed.
set -euo pipefail
bin=${1:-build/turbospark}
cd "$(dirname "$0")/.."
model=models/demo.gguf
if [ ! -f "$model" ] || [ models/demo/model.safetensors -nt "$model" ]; then
  echo "== turbospark convert models/demo -o $model --type bf16"
  "$bin" convert models/demo -o "$model" --type bf16 --quiet
fi
echo "== turbospark run -m $model -p \"And it came to pass\" -n 200"
"$bin" run -m "$model" -p "And it came to pass" -n 200 -s 42
echo
echo "== turbospark run (greedy, a second prompt)"
"$bin" run -m "$model" -p "In the beginning God created" -n 60 --temp 0
echo
echo "== turbospark inspect $model (summary)"
"$bin" inspect "$model" | grep -E "^(file|architecture|tensors|model) "
cat <<'TXT'

Try it yourself:
  build/turbospark run -m models/demo.gguf -p "Blessed are the" -n 100
  build/turbospark chat -m models/demo.gguf          (the demo model knows scripture, not chat)
  build/turbospark --help
TXT
