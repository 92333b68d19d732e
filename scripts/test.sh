#!/usr/bin/env bash
# Run every test on a fresh Debian machine with the Rust toolchain: installs and starts
# PostgreSQL, Redis, Node.js and Python's venv if needed (scripts/services.sh), installs the
# wasm32-wasip2 target, builds the plugins (the Python and JavaScript examples with their pinned
# tools), installs the pinned `bullmq` package for the interop tests, checks formatting and
# lints, then runs the whole workspace's tests (each sqlx::test makes its own database).
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
  # The Python and JavaScript example handlers (their pinned toolchains install on first use).
  scripts/build-plugin-examples.sh
fi
# The real `bullmq` package (pinned by interop/bullmq/package-lock.json) for the interop tests;
# reinstalled when the lock file changes. Install scripts are skipped: bullmq's optional native
# msgpack build is not needed (it falls back to JavaScript).
if [ ! -f interop/bullmq/node_modules/.package-lock.json ] \
  || [ interop/bullmq/package-lock.json -nt interop/bullmq/node_modules/.package-lock.json ]; then
  (cd interop/bullmq && npm ci --ignore-scripts --no-audit --no-fund)
fi
# A real browser for the console's tests: Debian's chromium and its WebDriver.
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
  echo "installing chromium and chromium-driver with apt-get"
  as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# Style and lints are part of the test: CI refuses unformatted code and any clippy warning
# (the lints are declared in Cargo.toml's [workspace.lints]).
for component in rustfmt clippy; do
  rustup component list --installed | grep -q "^$component" || rustup component add "$component"
done
cargo fmt --all --check
# Clippy lints the workspace while the tests are compiled, instead of in a `cargo clippy` pass of
# its own: that is what `cargo clippy` does under the hood (clippy-driver as the workspace's rustc,
# CLIPPY_ARGS its arguments), but a separate pass type-checks every dependency a second time
# (wasmtime and cranelift in check mode), a third of a cold run. Dependencies are compiled by plain
# rustc either way; the same targets are linted (`--all-targets`, test and non-test builds), and
# any clippy or rustc warning in the workspace fails the build.
export RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver)"
export CLIPPY_ARGS="-Dwarnings"
cargo test --workspace --all-targets --no-run
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace --doc 2>&1 | tee -a "$log"
cargo test --workspace --all-targets "$@" 2>&1 | tee -a "$log"
# One closing line for the whole run (cargo prints one result line per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
