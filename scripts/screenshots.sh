#!/usr/bin/env bash
# The web page's screenshots in docs/ (web-run-390.png, web-run-1280.png, web-run.png and
# web-batch.png) made again by the browser tests that take them, in a real headless Chromium
# (/usr/bin/chromium) against the loopback model: `bash scripts/screenshots.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || python=python3
DELEGATE_TEST_SCREENSHOTS="$PWD/docs" "$python" -m pytest -q \
  tests/test_web_layout.py \
  "tests/test_web_run.py::test_the_timeline_overlaps_parallel_subagents_and_not_a_later_one_also_after_a_reload" \
  "tests/test_web_run.py::test_the_batch_page_draws_a_bar_per_item_over_time" "$@"
