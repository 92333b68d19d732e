#!/usr/bin/env bash
# Build the plugins in plugins/ for wasm32-wasip2 and copy them to plugins/dist/ (the host's
# default plugin directory). Built .wasm files are never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-plugins/target}"
cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml
mkdir -p plugins/dist
for f in "$target"/wasm32-wasip2/release/*.wasm; do
  name="$(basename "$f" .wasm)"
  cp "$f" "plugins/dist/${name//_/-}.wasm"
done
ls -1 plugins/dist
