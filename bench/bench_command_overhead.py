"""What the sandbox costs per command: the median time of `run_command("true")` in the real
bubblewrap sandbox, in a workspace of 1,000 files in 50 folders, 30 commands after 3 to warm up.

    python bench/bench_command_overhead.py            # this checkout
    PYTHONPATH=/other/src python bench/bench_command_overhead.py   # another one, same sitting

Issue 34 added to each command a walk of the workspace after it (git repositories a command made
are removed) and a memory cgroup beside the pids one; compare the medians of two checkouts run one
after the other on the same machine."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from delegate.tools import run_command
from delegate.workspace import CommandPolicy, Workspace

COMMANDS, WARM = 30, 3


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for folder in range(50):
            (root / f"d{folder}").mkdir()
            for n in range(20):
                (root / f"d{folder}" / f"f{n}.txt").write_text("x" * 100)
        workspace = Workspace.open(root, allow_commands=True, commands=CommandPolicy())
        times: list[float] = []
        for i in range(COMMANDS + WARM):
            began = time.perf_counter()
            result = asyncio.run(run_command("true", workspace, timeout=60))
            assert result.exit_code == 0, result
            if i >= WARM:
                times.append(time.perf_counter() - began)
        print(f"run_command('true'), 1,000 files: median {statistics.median(times) * 1000:.1f} ms over {COMMANDS}")


if __name__ == "__main__":
    main()
