#!/usr/bin/env bash
# The demo on the local PostgreSQL and Redis: builds the plugins if needed (the router plugin
# routes the demo's events), then runs `outbox demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/}"
scripts/services.sh >/dev/null
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
if [ ! -f plugins/dist/prefix-router.wasm ]; then
  scripts/build-plugins.sh
fi
# The first build compiles wasmtime and the rest of the host: say so, and let cargo show its
# progress, instead of sitting silent for minutes.
if [ ! -x "${CARGO_TARGET_DIR:-target}/debug/outbox" ]; then
  echo "building the outbox binary first: a cold build takes about 10-15 minutes on 2 cores (later runs start at once)" >&2
fi
exec cargo run -p outbox-cli --bin outbox -- demo "$@"
