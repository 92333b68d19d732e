#!/usr/bin/env bash
# The full chaos run: real `outbox run` processes under SIGKILLs, two and three hosts at once,
# terminated PostgreSQL backends, killed Redis connections, Redis refusing connections, and
# hot reloads of the router plugin, handler plugins and routes.toml, while producers commit
# OUTBOX_CHAOS_EVENTS events (default 100,000; some transactions rolled back). Prints one
# summary line (events, kills, restarts, connection cuts, reloads, lost, duplicated, stuck) and
# fails if anything was lost, doubled or stuck. OUTBOX_CHAOS_SEED repeats a run's choices.
# Extra arguments go to the test binary (e.g. --test-threads=1).
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/}"
export OUTBOX_CHAOS_EVENTS="${OUTBOX_CHAOS_EVENTS:-100000}"
scripts/services.sh >/dev/null
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
scripts/build-plugins.sh
exec cargo test ${OUTBOX_CHAOS_PROFILE:+--profile "$OUTBOX_CHAOS_PROFILE"} -p outbox-cli --test chaos -- \
  --ignored --nocapture chaos_full_run "$@"
