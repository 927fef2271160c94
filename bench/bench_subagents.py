"""Framework cost of delegation: a lead fans out to N subagents whose model answers at once.

    python bench/bench_subagents.py            # full: N = 100, 1000, 10000; latency run; loop turn cost
    python bench/bench_subagents.py --quick    # smaller, for a smoke check

Reports medians over repeats: ms of framework time per subagent (zero-latency fake model, so all
time is ours), the ratio between N=10,000 and N=100 (flatness), the makespan of N=1000 subagents
whose model waits 50 ms each under an unlimited cap, and the loop's own cost per model turn.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from pathlib import Path

from _fanout import task_calls

from delegate import LoopSettings, Message, RunLimits, Runtime, ToolContext, Workspace
from delegate.cli._common import COLLECTOR_THRESHOLDS, tune_collector  # pyright: ignore[reportPrivateUsage]
from delegate.loop import AgentSpec, run_agent
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, ScriptedModel, call, reply, respond
from delegate.tools import tool


def fan_out_model(n: int, latency: float) -> FunctionModel:
    calls = task_calls(n)

    async def answer(request: ModelRequest) -> ModelResponse:
        if request.system.startswith(LEAD_INSTRUCTIONS):
            return respond(calls) if len(request.messages) == 1 else reply("all done")
        if latency:
            await asyncio.sleep(latency)
        return call("complete", summary="ok")

    return FunctionModel(answer)


async def one_run(root: Path, n: int, latency: float, store: bool) -> float:
    rt = Runtime(
        model=fan_out_model(n, latency),
        workspace=root,
        store=None if store else False,
        limits=RunLimits(max_parallel=None, max_subagents=None),
        loop=LoopSettings(heartbeat_interval=3600),
    )
    start = time.perf_counter()
    result = await rt.run("fan out")
    elapsed = time.perf_counter() - start
    assert len(result.subagents) == n and all(s.status == "completed" for s in result.subagents), result.final[:200]
    return elapsed


def median_of(root: Path, n: int, latency: float, repeats: int, store: bool = False, collector: bool = True) -> float:
    """The median of `repeats` runs; `collector=False` pauses Python's garbage collector during
    each (after a full collection), to tell the framework's own cost from the collector's."""
    times: list[float] = []
    for _ in range(repeats):
        if not collector:
            gc.collect()
            gc.disable()
        try:
            times.append(asyncio.run(one_run(root, n, latency, store)))
        finally:
            gc.enable()
    return statistics.median(times)


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


async def loop_turns(root: Path, turns: int) -> float:
    """An agent of `turns` turns, each a call of a tool that does nothing: the loop's own cost."""
    model = ScriptedModel([call("echo", text=f"hi {n}") for n in range(turns - 1)] + [reply("done")])
    tools = [echo]
    spec = AgentSpec(name="bench", instructions="x", model=model, tools=tools, max_steps=turns + 1)
    ctx = ToolContext(run_id="r", agent_id="lead", workspace=Workspace.open(root), emit=lambda e: None)
    start = time.perf_counter()
    await run_agent(spec, ctx, [Message.user("go")])
    return (time.perf_counter() - start) / turns


async def loop_turns_bare(root: Path, turns: int) -> float:
    """The same turns with no tool work at all: a reply each time, to see the loop alone."""
    model = ScriptedModel([reply("x")] * turns)
    spec = AgentSpec(name="bench", instructions="x", model=model, tools=[], max_steps=2)
    ctx = ToolContext(run_id="r", agent_id="lead", workspace=Workspace.open(root), emit=lambda e: None)
    start = time.perf_counter()
    for _ in range(turns):
        await run_agent(spec, ctx, [Message.user("go")])
    return (time.perf_counter() - start) / turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [100, 1000] if args.quick else [100, 1000, 10_000]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asyncio.run(one_run(root, 200, 0.0, False))  # warm up imports and caches
        per: dict[int, float] = {}
        for n in sizes:
            repeats = args.repeats if n <= 1000 else max(1, args.repeats // 2)
            per[n] = median_of(root, n, 0.0, repeats) / n * 1000
            print(f"fan-out N={n:>6}: {per[n]:.3f} ms framework time per subagent (median of {repeats})")
        print(f"flatness: N={sizes[-1]} / N=100 per-subagent cost ratio = {per[sizes[-1]] / per[100]:.2f}x")
        big = sizes[-1]
        paused = {n: median_of(root, n, 0.0, 3, collector=False) / n * 1000 for n in (1000, big)}
        print(
            f"with the garbage collector paused: N=1000 {paused[1000]:.3f}, N={big} {paused[big]:.3f} ms per "
            f"subagent; N={big} / N=1000 = {paused[big] / paused[1000]:.2f}x "
            f"(with it running: {per[big] / per[1000]:.2f}x; see docs/subagents.md, Fan-outs of thousands)"
        )
        old = gc.get_threshold()
        tune_collector()
        tuned = {n: median_of(root, n, 0.0, 3) / n * 1000 for n in (1000, big)}
        gc.unfreeze()
        gc.set_threshold(*old)
        print(
            f"as delegate's commands run it (tune_collector: start-up frozen, thresholds {COLLECTOR_THRESHOLDS}): "
            f"N=1000 {tuned[1000]:.3f}, N={big} {tuned[big]:.3f} ms per subagent; "
            f"N={big} / N=1000 = {tuned[big] / tuned[1000]:.2f}x"
        )
        stored = median_of(root, 1000, 0.0, args.repeats, store=True) / 1000 * 1000
        print(
            f"fan-out N=  1000 with the SQLite store on: {stored:.3f} ms per subagent "
            f"({stored / per[1000]:.2f}x the storeless run)"
        )
        makespan = median_of(root, 1000, 0.05, args.repeats)
        print(
            f"N=1000 subagents, model latency 50 ms, unlimited cap: makespan {makespan:.3f} s "
            f"(ideal 0.050 s; {makespan / 0.05:.1f}x)"
        )
        turn = statistics.median(asyncio.run(loop_turns(root, 2000)) for _ in range(args.repeats))
        bare = statistics.median(asyncio.run(loop_turns_bare(root, 2000)) for _ in range(args.repeats))
        print(
            f"loop cost per model turn (scripted model, zero latency): {turn * 1e6:.1f} µs with one tool "
            f"call; {bare * 1e6:.1f} µs for a whole one-turn agent run"
        )


if __name__ == "__main__":
    main()
