#!/usr/bin/env bash
# Build the example JavaScript handler into a WebAssembly component.
#
#   plugins/examples/js-handler/build.sh OUT.wasm
#
# Installs the pinned toolchain from package-lock.json (npm ci) when node_modules is missing or
# older than the lock file, then runs ComponentizeJS on handler.js against the plugin contract
# (../../../plugin-sdk/wit, world `handler`). Needs Node.js 20+ and npm; everything else comes from
# the npm registry (the StarlingMonkey engine and wizer ship inside npm packages).
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
out="$(realpath -m -- "$1")"
mkdir -p "$(dirname "$out")"
cd "$(dirname "$0")"

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules ]; then
    echo "installing the toolchain (npm ci) ..."
    npm ci --no-audit --no-fund
    touch node_modules
fi

version() { node -p "require('./node_modules/$1/package.json').version"; }
echo "node $(node --version), componentize-js $(version @bytecodealliance/componentize-js)," \
    "jco $(version @bytecodealliance/jco)"

start=$(date +%s%N)
# http and fetch-event are ComponentizeJS features that import wasi:http, which the outbox host
# does not link (plugins reach HTTP through outbox:plugin/http).
./node_modules/.bin/componentize-js handler.js \
    --wit ../../../plugin-sdk/wit \
    --world-name handler \
    --disable http fetch-event \
    --out "$out"
end=$(date +%s%N)
ms=$(( (end - start) / 1000000 ))
printf 'built %s (%s bytes) in %d.%03d s\n' "$out" "$(wc -c <"$out" | tr -d ' ')" $((ms / 1000)) $((ms % 1000))
