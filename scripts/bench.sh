#!/usr/bin/env bash
# Every headline figure of the host with its baseline, measured in one run: builds the release
# binaries (`outbox-bench` and the `outbox` binary the memory section runs) and the plugins
# (the Python and JavaScript examples too),
# installs the graphile-worker baseline (bench/graphile-worker, `npm ci`) when npm is there, then
# runs outbox-bench with every section. Arguments go to outbox-bench:
#   scripts/bench.sh --json                      # one JSON document on stdout
#   scripts/bench.sh --only dispatch,e2e         # some sections
#   scripts/bench.sh --database b2 --redis-prefix b2:   # beside another run
# Progress and build output go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/}"
scripts/services.sh >&2
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2 >&2
fi
scripts/build-plugins.sh >&2
# The Python and JavaScript example handlers (the languages section), with their pinned tools.
scripts/build-plugin-examples.sh >&2
cargo build --release -p outbox-cli >&2
if [ ! -d bench/graphile-worker/node_modules/graphile-worker ]; then
  if command -v npm >/dev/null; then
    (cd bench/graphile-worker && npm ci --no-audit --no-fund) >&2
  else
    echo "npm not found: the graphile-worker baseline will be skipped" >&2
  fi
fi
target="${CARGO_TARGET_DIR:-target}"
exec "$target/release/outbox-bench" "$@"
