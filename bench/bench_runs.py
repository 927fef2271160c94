"""What durable runs cost: checkpoints per model turn, fan-out with the store on, resuming.

    python bench/bench_runs.py            # full: N = 1,000 and 10,000 subagents
    python bench/bench_runs.py --quick    # N = 1,000 only, fewer repeats

Reports medians over repeats, each next to its baseline measured in the same run:

- checkpointing: a lead of 500 turns (each one tool call) with the SQLite store on, against the
  same lead with no store; the difference per turn is what recording each answer and tool result
  (and its events) costs the run;
- fan-out with the default SQLite store on: framework time per subagent at N = 1,000 and 10,000
  (zero-latency model), and the ratio between them (flatness); the storeless run alongside, run
  in turn with it, and the CPU time of both (the writer thread's included), which a machine
  shared with other work disturbs less than wall time;
- 1,000 subagents whose model waits 50 ms, the store on, no cap: the makespan (and storeless);
- resuming a run whose 1,000 subagents had finished when its process was killed (SIGKILL): the
  time from `Runtime.resume` to its end, the lead's last answer included.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_subagents import one_run

from delegate._runtime import Runtime
from delegate._store import Store
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, ScriptedModel, call, reply
from delegate.tools import tool


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


async def lead_turns(root: Path, turns: int, store: bool) -> float:
    model = ScriptedModel([call("echo", text="hi") for _ in range(turns - 1)] + [reply("done")])
    rt = Runtime(
        model=model,
        workspace=root,
        tools=[echo],
        builtin=[],
        max_steps=turns + 1,
        store=None if store else False,
        heartbeat_interval=3600,
    )
    start = time.perf_counter()
    result = await rt.run("echo many times")
    elapsed = time.perf_counter() - start
    await rt.aclose()
    assert result.status == "completed" and result.steps == turns
    return elapsed / turns


_KILLED_RUN = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[3])
    from bench_subagents import fan_out_model
    from delegate._runtime import Runtime
    from delegate.models import ModelRequest, ModelResponse
    from delegate.subagents import LEAD_INSTRUCTIONS
    from delegate.testing import FunctionModel

    fan_out = fan_out_model(int(sys.argv[2]), 0.0)

    async def answer(request: ModelRequest) -> ModelResponse:
        if request.system.startswith(LEAD_INSTRUCTIONS) and len(request.messages) > 1:
            await asyncio.Event().wait()  # the lead's last turn never comes: the process is killed here
        return await fan_out.complete(request)

    rt = Runtime(model=FunctionModel(answer), workspace=sys.argv[1], max_parallel=None, max_subagents=None)
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
        rt = Runtime(model=FunctionModel(lead_only), workspace=root, max_parallel=None, max_subagents=None)
        start = time.perf_counter()
        result = await rt.resume(run_id)
        elapsed = time.perf_counter() - start
        await rt.aclose()
        assert result.status == "completed" and len(result.subagents) == n, result.status
        return elapsed

    return asyncio.run(go())


def fan_out(root: Path, n: int, store: bool) -> tuple[float, float]:
    """Wall time and CPU time of this process (the writer thread's included) for one fan-out."""
    cpu = time.process_time()
    wall = asyncio.run(one_run(root, n, 0.0, store))
    return wall, time.process_time() - cpu


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

        asyncio.run(one_run(fresh(), 200, 0.0, True))  # warm up imports and caches
        on = statistics.median(asyncio.run(lead_turns(fresh(), 500, True)) for _ in range(repeats))
        off = statistics.median(asyncio.run(lead_turns(fresh(), 500, False)) for _ in range(repeats))
        print(
            f"checkpointing: {(on - off) * 1e3:.3f} ms per model turn "
            f"({on * 1e3:.3f} ms a turn with the store, {off * 1e3:.3f} ms without)"
        )
        sizes = [1000] if args.quick else [1000, 10_000]
        per: dict[int, float] = {}
        for n in sizes:
            # store on and off in turn, so that both see the same load of the machine
            runs = [(fan_out(fresh(), n, True), fan_out(fresh(), n, False)) for _ in range(repeats if n <= 1000 else 1)]
            on_wall, on_cpu, off_wall, off_cpu = (
                statistics.median(r[store][k] for r in runs) / n * 1e6 for store in (0, 1) for k in (0, 1)
            )
            per[n] = on_wall
            print(
                f"fan-out N={n:>6}, SQLite store on: {on_wall:.0f} µs per subagent, no store: {off_wall:.0f} µs "
                f"({on_wall / off_wall:.2f}x); CPU time: {on_cpu:.0f} µs and {off_cpu:.0f} µs "
                f"({on_cpu / off_cpu:.2f}x)"
            )
        if len(sizes) > 1:
            print(f"flatness with the store on: N=10,000 / N=1,000 = {per[10_000] / per[1000]:.2f}x")
        spans = [
            (asyncio.run(one_run(fresh(), 1000, 0.05, True)), asyncio.run(one_run(fresh(), 1000, 0.05, False)))
            for _ in range(repeats)
        ]
        on, off = (statistics.median(s[i] for s in spans) for i in (0, 1))
        print(f"N=1000 subagents, model latency 50 ms, store on: makespan {on:.3f} s (no store: {off:.3f} s)")
        resumed = statistics.median(resume_after_kill(fresh(), 1000) for _ in range(repeats))
        print(f"resume after SIGKILL of a run with 1,000 finished subagents: {resumed:.3f} s")


if __name__ == "__main__":
    main()
