"""This code's storeless fan-out against another checkout's, in turn, in one sitting.

    python bench/bench_fanout_ab.py /path/to/other/src            # 3 rounds each, in turn
    python bench/bench_fanout_ab.py /path/to/other/src --rounds 5

`git worktree add /tmp/old ee2be45` gives the other checkout (`/tmp/old/src`). Each round runs a fresh
process per checkout (this one, then the other), so neither inherits the other's caches, and the
machine's load falls on both alike. Each process reports:

- its resident memory (RSS) after `import delegate; delegate.Runtime`, and after one warm-up
  fan-out of 200 (the process as it stands before the timed runs);
- µs of framework time per subagent of the fan-out of `bench_subagents.py` (a lead's `task` calls
  of 100 prompts each; a model that answers at once), storeless at N = 1,000 (median of 3) and
  10,000 (one run), and with the SQLite store at N = 1,000 (median of 3).

Printed: the median over rounds of each figure for both checkouts, and this code's over the other's.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from _fanout import ab


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def child() -> None:
    """One process's figures, as a JSON line (runs with PYTHONPATH set to one checkout's src)."""
    import asyncio

    import delegate

    delegate.Runtime  # noqa: B018  (the lazy import a user's first use makes)
    imported = rss_mb()
    from _fanout import task_calls

    from delegate.models import ModelRequest, ModelResponse
    from delegate.subagents import LEAD_INSTRUCTIONS
    from delegate.testing import FunctionModel, call, reply, respond

    def model(n: int) -> FunctionModel:
        calls = task_calls(n, "b")

        def answer(request: ModelRequest) -> ModelResponse:
            if request.system.startswith(LEAD_INSTRUCTIONS):
                return respond(calls) if len(request.messages) == 1 else reply("all done")
            return call("complete", summary="ok")

        return FunctionModel(answer)

    async def one(root: Path, n: int, store: bool) -> float:
        if hasattr(delegate, "RunLimits"):  # the settings objects (Runtime takes them whole)
            rt = delegate.Runtime(
                model=model(n),
                workspace=root,
                store=None if store else False,
                limits=delegate.RunLimits(max_parallel=None, max_subagents=None),
                loop=delegate.LoopSettings(heartbeat_interval=3600),
            )
        else:  # the code of before them: each setting a keyword
            rt = delegate.Runtime(
                model=model(n),
                workspace=root,
                max_parallel=None,
                max_subagents=None,
                store=None if store else False,
                heartbeat_interval=3600,
            )
        start = time.perf_counter()
        result = await rt.run("fan out")
        elapsed = time.perf_counter() - start
        assert len(result.subagents) == n and all(s.status == "completed" for s in result.subagents)
        return elapsed / n * 1e6

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asyncio.run(one(root, 200, False))
        before = rss_mb()
        storeless = statistics.median(asyncio.run(one(root, 1000, False)) for _ in range(3))
        large = asyncio.run(one(root, 10_000, False))
        stored = statistics.median(asyncio.run(one(root, 1000, True)) for _ in range(3))
    figures = {"rss_import": imported, "rss_before": before, "n1000": storeless, "n10000": large, "store": stored}
    print(json.dumps(figures))


ROWS = [
    ("RSS after import delegate; delegate.Runtime", "rss_import", "MB"),
    ("RSS before the timed runs (after a fan-out of 200)", "rss_before", "MB"),
    ("storeless fan-out, N = 1,000", "n1000", "µs/subagent"),
    ("storeless fan-out, N = 10,000", "n10000", "µs/subagent"),
    ("SQLite store on, N = 1,000", "store", "µs/subagent"),
]


def main() -> None:
    med = ab(__doc__ or "", __file__, lambda _: child(), ROWS)
    if med is not None:
        this = med["this"]
        print(
            f"  this code: 10,000 / 1,000 = {this['n10000'] / this['n1000']:.2f}x; "
            f"store on / storeless = {this['store'] / this['n1000']:.2f}x"
        )


if __name__ == "__main__":
    main()
