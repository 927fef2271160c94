"""What durable runs cost: checkpoints per model turn, fan-out with the store on, resuming.

    python bench/bench_runs.py            # full: N = 1,000 and 10,000 subagents
    python bench/bench_runs.py --quick    # N = 1,000 only, fewer repeats

Reports medians over repeats, each next to its baseline measured in the same run, wall time and
CPU time of the process (the writer thread's included), which a machine shared with other work
disturbs less than wall time, and the load average at the start and the end:

- creating a workspace's store (the database file and its tables), which its first run does;
- checkpointing: a lead of 500 turns (each one tool call) with the SQLite store on, against the
  same lead with no store; the difference per turn is what recording each answer and tool result
  (and its events) costs the run;
- fan-out with the default SQLite store on: framework time per subagent at N = 1,000 and 10,000
  (zero-latency model), and the ratio between them (flatness), in a workspace whose store exists
  (every run after its first) and in one whose store the run creates, the storeless run in turn;
- 1,000 subagents whose model waits 50 ms, no cap: the makespan, the same three ways;
- resuming a run whose 1,000 subagents had finished when its process was killed (SIGKILL): the
  time from `Runtime.resume` to its end, the lead's last answer included.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from bench_subagents import one_run

from delegate import Lead, LoopSettings, RunLimits, Runtime, Store
from delegate.batch import Batches
from delegate.memory import MEMORY_MIGRATIONS
from delegate.models import ModelRequest, ModelResponse
from delegate.skills import SKILL_MIGRATIONS
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, ScriptedModel, call, reply
from delegate.tools import tool


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


async def lead_turns(root: Path, turns: int, store: bool) -> None:
    # each call a new one, so the loop guard sees progress (and its cost is in the figure)
    model = ScriptedModel([call("echo", text=f"hi {n}") for n in range(turns - 1)] + [reply("done")])
    rt = Runtime(
        model=model,
        workspace=root,
        store=None if store else False,
        lead=Lead(tools=["task", echo], max_steps=turns + 1),
        loop=LoopSettings(heartbeat_interval=3600),
    )
    result = await rt.run("echo many times")
    await rt.aclose()
    assert result.status == "completed" and result.steps == turns


_KILLED_RUN = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[3])
    from bench_subagents import fan_out_model
    from delegate import Runtime, RunLimits
    from delegate.models import ModelRequest, ModelResponse
    from delegate.subagents import LEAD_INSTRUCTIONS
    from delegate.testing import FunctionModel

    fan_out = fan_out_model(int(sys.argv[2]), 0.0)

    async def answer(request: ModelRequest) -> ModelResponse:
        if request.system.startswith(LEAD_INSTRUCTIONS) and len(request.messages) > 1:
            await asyncio.Event().wait()  # the lead's last turn never comes: the process is killed here
        return await fan_out.complete(request)

    rt = Runtime(
        model=FunctionModel(answer), workspace=sys.argv[1], limits=RunLimits(max_parallel=None, max_subagents=None)
    )
    asyncio.run(rt.run("fan out"))
    """
)


def resume_after_kill(root: Path, n: int) -> float:
    """Run a fan-out of `n` in a child process, SIGKILL it once every subagent is checkpointed,
    then time resuming it here."""
    child = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(root), str(n), str(Path(__file__).parent)])
    store = Store.for_workspace(root)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = store.list_runs(None, limit=1)
            if runs and sum(c.kind == "subagent" for c in store.checkpoints(runs[0].id)) >= n:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("the child never checkpointed its subagents")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    run_id = store.list_runs(None, limit=1)[0].id
    store.close()

    async def lead_only(request: ModelRequest) -> ModelResponse:
        assert request.system.startswith(LEAD_INSTRUCTIONS), "a finished subagent ran again"
        return reply("all done")

    async def go() -> float:
        rt = Runtime(
            model=FunctionModel(lead_only), workspace=root, limits=RunLimits(max_parallel=None, max_subagents=None)
        )
        start = time.perf_counter()
        result = await rt.resume(run_id)
        elapsed = time.perf_counter() - start
        await rt.aclose()
        assert result.status == "completed" and len(result.subagents) == n, result.status
        return elapsed

    return asyncio.run(go())


Mode = Literal["store", "new store", "no store"]
MODES: tuple[Mode, ...] = ("store", "new store", "no store")


def timed(go: Callable[[], object]) -> tuple[float, float]:
    """Wall time and CPU time of this process (the writer thread's included) of `go()`, from a
    collected heap: otherwise a run pays for collecting the garbage of the one before it (about
    40 µs a subagent for the run after a storeless one, which left more of it)."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    go()
    return time.perf_counter() - wall, time.process_time() - cpu


def make_store(root: Path) -> None:
    """Create the workspace's store as a first run in it leaves it: the database file and every
    table a run makes (the core's, the batches', the memory's and the skills' settings). Without
    the last two, each run timed "store on" made them itself: a first run's cost (3 migrations)."""
    store = Store.for_workspace(root)
    Batches(store)
    store.migrate([*MEMORY_MIGRATIONS, *SKILL_MIGRATIONS])
    store.close()


def fan_out(root: Path, n: int, mode: Mode, latency: float = 0.0) -> tuple[float, float]:
    """One fan-out timed: in a workspace whose store exists (`store`: every run after its first),
    in one whose store the run creates (`new store`), or with no store."""
    if mode == "store":
        make_store(root)
    return timed(lambda: asyncio.run(one_run(root, n, latency, mode != "no store")))


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def medians(runs: list[dict[Mode, tuple[float, float]]], scale: float) -> dict[Mode, tuple[float, float]]:
    return {
        m: (statistics.median(r[m][0] for r in runs) * scale, statistics.median(r[m][1] for r in runs) * scale)
        for m in MODES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        roots = iter(base / f"ws{i}" for i in range(10_000))

        def fresh() -> Path:
            root = next(roots)
            root.mkdir()
            return root

        print(f"start: {load()}")
        asyncio.run(one_run(fresh(), 200, 0.0, True))  # warm up imports and caches
        created = [timed(lambda: make_store(fresh())) for _ in range(repeats)]
        wall, cpu = (statistics.median(c[i] for c in created) * 1e3 for i in (0, 1))
        print(f"creating a workspace's store (its first run does): {wall:.1f} ms, CPU {cpu:.1f} ms")
        turns = []
        for _ in range(repeats):
            on_root = fresh()
            make_store(on_root)
            on = timed(lambda r=on_root: asyncio.run(lead_turns(r, 500, True)))
            off = timed(lambda: asyncio.run(lead_turns(fresh(), 500, False)))
            turns.append((on, off))
        (on_wall, on_cpu), (off_wall, off_cpu) = (
            (statistics.median(t[i][0] for t in turns) / 500, statistics.median(t[i][1] for t in turns) / 500)
            for i in (0, 1)
        )
        print(
            f"checkpointing: {(on_wall - off_wall) * 1e3:.3f} ms per model turn, CPU {(on_cpu - off_cpu) * 1e3:.3f} ms "
            f"(a turn: {on_wall * 1e3:.3f} ms with the store, {off_wall * 1e3:.3f} ms without; "
            f"CPU {on_cpu * 1e3:.3f} and {off_cpu * 1e3:.3f} ms)"
        )
        sizes = [1000] if args.quick else [1000, 10_000]
        per: dict[int, dict[Mode, tuple[float, float]]] = {}
        for n in sizes:
            # the three in turn, so that all see the same load of the machine
            runs = [{m: fan_out(fresh(), n, m) for m in MODES} for _ in range(repeats)]
            per[n] = got = medians(runs, 1e6 / n)
            print(
                f"fan-out N={n:>6}, µs per subagent (wall, CPU): SQLite store on {got['store'][0]:.0f}, "
                f"{got['store'][1]:.0f}; no store {got['no store'][0]:.0f}, {got['no store'][1]:.0f} "
                f"(ratios {got['store'][0] / got['no store'][0]:.2f}x, {got['store'][1] / got['no store'][1]:.2f}x); "
                f"store created by the run {got['new store'][0]:.0f}, {got['new store'][1]:.0f}"
            )
        if len(sizes) > 1:
            flat = {m: per[10_000][m][0] / per[1000][m][0] for m in MODES}
            print(
                f"flatness, N=10,000 / N=1,000: store on {flat['store']:.2f}x, no store {flat['no store']:.2f}x, "
                f"store created by the run {flat['new store']:.2f}x"
            )
        spans = medians([{m: fan_out(fresh(), 1000, m, 0.05) for m in MODES} for _ in range(repeats)], 1.0)
        print(
            f"N=1000 subagents, model latency 50 ms, makespan (wall, CPU) in s: store on {spans['store'][0]:.3f}, "
            f"{spans['store'][1]:.3f}; no store {spans['no store'][0]:.3f}, {spans['no store'][1]:.3f} "
            f"({spans['store'][0] / spans['no store'][0]:.2f}x); store created by the run {spans['new store'][0]:.3f}, "
            f"{spans['new store'][1]:.3f}"
        )
        resumed = statistics.median(resume_after_kill(fresh(), 1000) for _ in range(repeats))
        print(f"resume after SIGKILL of a run with 1,000 finished subagents: {resumed:.3f} s")
        print(f"end: {load()}")


if __name__ == "__main__":
    main()
