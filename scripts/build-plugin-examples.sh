#!/usr/bin/env bash
# Build the Python and JavaScript example handlers (plugins/examples/python-handler and
# js-handler) into plugins/dist/examples/, beside the Rust twin scripts/build-plugins.sh builds
# there. Each build script installs its pinned toolchain on first use (componentize-py from PyPI
# into ~/.cache/outbox, ComponentizeJS from npm into the example's node_modules). A component is
# rebuilt only when its sources, its build script or the WIT package changed: the tools do not
# build byte for byte the same file twice, and a new file is a new plugin version to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
out=plugins/dist/examples
mkdir -p "$out"
wit=(plugin-sdk/wit/outbox.wit)

# Whether $1 is missing or older than any of the files after it.
stale() {
  local target="$1"
  shift
  [ ! -f "$target" ] && return 0
  for source in "$@"; do
    [ "$source" -nt "$target" ] && return 0
  done
  return 1
}

python=plugins/examples/python-handler
if stale "$out/python-handler.wasm" "$python/app.py" "$python/build.sh" "${wit[@]}"; then
  "$python/build.sh" "$out/python-handler.wasm"
fi
js=plugins/examples/js-handler
if stale "$out/js-handler.wasm" "$js/handler.js" "$js/build.sh" "$js/package-lock.json" "${wit[@]}"; then
  "$js/build.sh" "$out/js-handler.wasm"
fi
echo "plugin examples built: $(ls "$out"/*.wasm | wc -l) in $out"
