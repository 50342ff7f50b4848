#!/usr/bin/env bash
# Seeds fuzz/corpus/import with small real models. Each file's first byte is
# the fuzz target's batch selector.
set -euo pipefail
cd "$(dirname "$0")"
shared=${AOTUNE_SHARED:-../../shared}
mkdir -p corpus/import
for m in "$shared"/onnx-node-tests/*/model.onnx "$shared"/fixtures/*/model.graph.onnx; do
  [ -f "$m" ] || continue
  name=$(basename "$(dirname "$m")")
  { printf '\x00'; cat "$m"; } > "corpus/import/$name"
done
ls corpus/import | wc -l
