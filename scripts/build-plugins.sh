#!/usr/bin/env bash
# Build the plugins in plugins/ for wasm32-wasip2 and copy them to plugins/dist/ (the host's
# default plugin directory); test-only plugins go to plugins/dist/test/. Built .wasm files are
# never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-plugins/target}"
cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml
mkdir -p plugins/dist/test plugins/dist/examples
for f in "$target"/wasm32-wasip2/release/*.wasm; do
  name="$(basename "$f" .wasm)"
  name="${name//_/-}"
  if [ -d "plugins/test-plugins/$name" ]; then
    cp "$f" "plugins/dist/test/$name.wasm"
  elif [ -d "plugins/examples/$name" ]; then
    cp "$f" "plugins/dist/examples/$name.wasm"
  else
    cp "$f" "plugins/dist/$name.wasm"
  fi
done
echo "plugins built: $(ls plugins/dist/*.wasm | wc -l) in plugins/dist, $(ls plugins/dist/test/*.wasm | wc -l) test plugins in plugins/dist/test"
