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
exec cargo run -q -p outbox-cli --bin outbox -- demo "$@"
