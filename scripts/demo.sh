#!/usr/bin/env bash
# make demo: the engine's main job on the bundled model.
# Generation lands with the CPU forward pass and the tokenizer (issues 4 and 5); until then the demo
# shows what the loader sees in the bundled GGUF, through the same validating reader.
set -euo pipefail
bin=${1:-build/turbospark}
cd "$(dirname "$0")/.."
model=tests/fixtures/gguf/sample.gguf
echo "== turbospark inspect $model"
"$bin" inspect "$model"
echo
echo "== turbospark inspect $model --tensors"
"$bin" inspect "$model" --tensors | sed -n '/^tensor list/,$p'
echo
echo "== turbospark devices"
"$bin" devices
cat <<'TXT'

This build reads and validates GGUF files (any architecture), lists their metadata and tensors, and
dequantizes any tensor to .npy (turbospark inspect FILE --dump NAME -o OUT.npy).
Once the CPU forward pass and the tokenizer land, `make demo` will generate text from the bundled
demo model (models/) with `turbospark run`.
TXT
