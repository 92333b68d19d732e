#!/usr/bin/env bash
# Build the Python example handler into a WebAssembly component the outbox host loads.
#
#   plugins/examples/python-handler/build.sh OUT.wasm
#
# Needs python3 (3.10+) with venv and pip, and PyPI. Installs componentize-py (pinned below) into
# ${XDG_CACHE_HOME:-$HOME/.cache}/outbox/componentize-py-<version> on first use, then compiles
# app.py against ../../../plugin-sdk/wit, world `handler`. componentize-py generates the Python
# bindings (the `wit_world` modules) itself, in memory: nothing generated lands in the repository.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT.wasm" >&2
    exit 2
fi
case "$1" in
    /*) out="$1" ;;
    *) out="$PWD/$1" ;;
esac

cd "$(dirname "$0")"
here="$PWD"
wit="$here/../../../plugin-sdk/wit"

venv="${XDG_CACHE_HOME:-$HOME/.cache}/outbox/componentize-py-$COMPONENTIZE_PY_VERSION"
tool="$venv/bin/componentize-py"
if [ ! -f "$venv/.installed" ]; then
    echo "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "componentize-py==$COMPONENTIZE_PY_VERSION"
    touch "$venv/.installed"
fi
"$tool" --version >&2

# componentize-py imports the app while building (and writes __pycache__ beside it), and bundles
# every file of its --python-path: build from a scratch copy holding app.py alone.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/app.py" "$work/"

now() { python3 -c "import time; print(time.time())"; }
start=$(now)
# VIRTUAL_ENV unset: componentize-py would otherwise add an active venv's site-packages.
(cd "$work" && env -u VIRTUAL_ENV "$tool" --quiet -d "$wit" -w handler \
    componentize --python-path "$work" app -o "$out")
end=$(now)
printf 'built %s (%s bytes) in %.1f s\n' "$out" "$(wc -c <"$out" | tr -d ' ')" \
    "$(python3 -c "print($end - $start)")" >&2
