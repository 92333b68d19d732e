#!/usr/bin/env bash
# Run every test on a machine that may have nothing but the Rust toolchain and the services'
# packages: starts PostgreSQL/Redis if needed, installs the wasm32-wasip2 target, builds the
# plugins, checks formatting and lints, then runs the whole workspace's tests (each sqlx::test
# makes its own database).
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/}"
scripts/services.sh
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
if [ -f plugins/Cargo.toml ]; then
  scripts/build-plugins.sh
fi
# Style and lints are part of the test: CI refuses unformatted code and any clippy warning
# (the lints are declared in Cargo.toml's [workspace.lints]).
for component in rustfmt clippy; do
  rustup component list --installed | grep -q "^$component" || rustup component add "$component"
done
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace --doc 2>&1 | tee -a "$log"
cargo test --workspace --all-targets "$@" 2>&1 | tee -a "$log"
# One closing line for the whole run (cargo prints one result line per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
