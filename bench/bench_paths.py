"""What race-free path resolution costs a `read_file` and a `list_dir`.

Calls the two tools' own functions (`_read_file`, `_list_dir`, as the tool runs them in its
worker thread) on a path three folders deep, a 4 KiB file and a folder of 50 entries, and
reports the median µs per call. With `--against SRC` (the `src` folder of another checkout, such
as the code before a change) it runs the same measurement there too, in a child process, the two
taking turns five times, and reports the ratio of the medians: one sitting, one machine, so the
ratio holds when the host is noisy.

    .venv/bin/python bench/bench_paths.py
    git worktree add /tmp/before <commit> && .venv/bin/python bench/bench_paths.py --against /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALLS = 2_000
ROUNDS = 5


def measure() -> dict[str, float]:
    """Median µs per call of each tool function, in this process's `delegate`."""
    from delegate import Workspace
    from delegate.tools import _files

    with tempfile.TemporaryDirectory() as folder:
        deep = Path(folder, "src", "pkg", "module")
        deep.mkdir(parents=True)
        (deep / "file.txt").write_text("a line of text\n" * 270)
        for n in range(50):
            (deep / f"entry{n}.txt").write_text("x")
        workspace = Workspace.open(folder)
        calls = {
            "read_file": lambda: _files._read_file(workspace, "src/pkg/module/file.txt", 1, 2000),  # pyright: ignore[reportPrivateUsage]
            "list_dir": lambda: _files._list_dir(workspace, "src/pkg/module"),  # pyright: ignore[reportPrivateUsage]
        }
        medians: dict[str, float] = {}
        for name, call in calls.items():
            call()
            times: list[float] = []
            for _ in range(CALLS):
                started = time.perf_counter()
                call()
                times.append(time.perf_counter() - started)
            medians[name] = statistics.median(times) * 1e6
    return medians


def in_child(src: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="the src folder of the code to compare with")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return
    here = str(Path(__file__).resolve().parent.parent / "src")
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    for _ in range(ROUNDS if args.against else 1):
        ours.append(in_child(here))
        if args.against:
            theirs.append(in_child(args.against))
    for name in ours[0]:
        mine = statistics.median(r[name] for r in ours)
        line = f"{name}: median {mine:.1f} µs a call"
        if theirs:
            other = statistics.median(r[name] for r in theirs)
            line += f"; the other code {other:.1f} µs; ratio {mine / other:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
