"""Workflows against the `prompts[]` form of `task` (issue 36's closing note), in one process, in
turn, `--rounds` times (medians):

1. framework time per agent: 1,000 agents in one workflow (`parallel()` of 1,000 calls) against
   the same 1,000 as a lead's `prompts[]` fan-out, a fake model that answers at once, the store
   off and on (SQLite); the ratio (target: at most 1.3x); the whole run over 1,000, and the time
   each agent past the first 100 added (what is left once the run's fixed cost is: building the
   runtime, the sandbox's start, the lead's turns);
2. the same 1,000 when each model call waits 50 ms: the makespan and how many were in flight at
   once (target: all 1,000);
3. a resume of a 1,000-agent workflow whose 900 agents had finished (interrupted with 100
   running): its wall time (ms) and the tokens it spent on the finished (target: 0).

    .venv/bin/python bench/bench_workflow.py [--agents 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fanout import task_calls

from delegate import RunLimits, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply, respond

LATENCY = 0.05


def workflow_script(n: int) -> str:
    return f"r = parallel([call('q' + str(i), type='explore', label='bench') for i in range({n})])\nlen(r)"


class Model:
    """Every subagent completes in one turn (after `latency`); the lead fans out `n` with
    `prompts[]`, then answers. Counts the calls in flight, and the most at once."""

    def __init__(self, n: int, latency: float = 0.0) -> None:
        self.n, self.latency = n, latency
        self.live = self.most = 0

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if any(m.role == "tool" for m in request.messages):
                return reply("done")
            return respond(task_calls(self.n))
        self.live += 1
        self.most = max(self.most, self.live)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            return call("complete", summary="ok")
        finally:
            self.live -= 1


async def one(form: str, n: int, store: bool, latency: float = 0.0) -> tuple[float, int]:
    """Seconds of one run of `n` agents in `form` (`workflow` or `prompts`), and the most in flight."""
    model = Model(n, latency)
    with tempfile.TemporaryDirectory() as tmp:
        limits = RunLimits(max_parallel=None, max_subagents=None, timeout=None)
        async with Runtime(model=FunctionModel(model), workspace=tmp, store=store, limits=limits) as rt:
            began = time.perf_counter()
            if form == "workflow":
                result = await rt.run("bench", workflow=workflow_script(n))
            else:
                result = await rt.run("bench")
            took = time.perf_counter() - began
    assert result.status == "completed" and len(result.subagents) == n, (form, result.status, result.error)
    return took, model.most


async def resume_cost(n: int, finished: int) -> dict[str, float]:
    """Interrupt a workflow of `n` agents once `finished` completed (the rest waiting on their
    model), then resume it: the resume's wall time, and the tokens and requests it spent."""
    gate = asyncio.Event()
    done = 0

    async def respond_to(request: ModelRequest) -> ModelResponse:
        nonlocal done
        task = next(m.text for m in request.messages if m.role == "user")
        if int(task.removeprefix("q")) >= finished:
            await gate.wait()
        done += 1
        return call("complete", summary="ok")

    with tempfile.TemporaryDirectory() as tmp:
        limits = RunLimits(max_parallel=None, timeout=None)
        rt = Runtime(model=FunctionModel(respond_to), workspace=tmp, limits=limits)
        going = asyncio.create_task(rt.run("bench", workflow=workflow_script(n)))
        while done < finished:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # the finished agents' records reach the store
        rt.interrupt()
        first = await going
        assert first.status == "interrupted", first.status
        before = first.usage
        gate.set()
        done = 0
        began = time.perf_counter()
        again = await rt.resume(first.run_id)
        took = time.perf_counter() - began
        await rt.aclose()
    assert again.status == "completed", again.error
    replayed = sum(a["replayed"] for a in again.workflow["agents"])
    return {
        "resume_ms": took * 1000,
        "replayed": replayed,
        "asked": done,
        "resume_tokens": again.usage.total_tokens - before.total_tokens,
        "finished_tokens": before.total_tokens,
    }


def med(values: list[float]) -> float:
    return statistics.median(values)


async def main(n: int, rounds: int) -> None:
    per: dict[str, list[float]] = {}
    most: dict[str, list[int]] = {}
    await one("workflow", 50, False)  # warm-up: imports, the sandbox's first start
    await one("prompts", 50, False)
    small = max(1, n // 10)
    for _ in range(rounds):
        for store in (False, True):
            for form in ("workflow", "prompts"):
                took, _ = await one(form, n, store)
                base, _ = await one(form, small, store)
                key = f"{form}/{'store' if store else 'nostore'}"
                per.setdefault(key, []).append(took / n * 1e6)
                per.setdefault(key + "/marginal", []).append((took - base) / (n - small) * 1e6)
        for form in ("workflow", "prompts"):
            took, live = await one(form, n, False, LATENCY)
            per.setdefault(f"{form}/50ms", []).append(took)
            most.setdefault(form, []).append(live)
    print(f"{n:,} agents, medians of {rounds} rounds (in turn, one process)")
    for store in ("nostore", "store"):
        wf, pr = med(per[f"workflow/{store}"]), med(per[f"prompts/{store}"])
        label = "store off" if store == "nostore" else "SQLite store on"
        said = f"workflow {wf:,.0f} us, prompts[] {pr:,.0f} us, ratio {wf / pr:.2f}x"
        print(f"  framework time per agent (whole run / {n:,}), {label}: {said}")
        wf, pr = med(per[f"workflow/{store}/marginal"]), med(per[f"prompts/{store}/marginal"])
        said = f"workflow {wf:,.0f} us, prompts[] {pr:,.0f} us, ratio {wf / pr:.2f}x"
        print(f"  framework time per added agent ({small:,} to {n:,}: the run's fixed cost left out), {label}: {said}")
    for form in ("workflow", "prompts"):
        print(
            f"  model waits {LATENCY * 1000:.0f} ms: {form} makespan {med(per[f'{form}/50ms']):.2f} s, "
            f"most in flight {min(most[form]):,} (least over rounds)"
        )
    costs = [await resume_cost(n, n * 9 // 10) for _ in range(rounds)]
    kept, left = n * 9 // 10, n - n * 9 // 10
    on_finished = max(c["resume_tokens"] - left * 15 for c in costs)  # each unfinished agent's answer: 15 tokens
    print(
        f"  resume of a {n:,}-agent workflow with {kept:,} finished: {med([c['resume_ms'] for c in costs]):,.0f} ms "
        f"(median); {min(c['replayed'] for c in costs):,} answered from the journal, "
        f"{max(c['asked'] for c in costs)} model calls asked; tokens spent on the finished: {on_finished} "
        f"(the resume spent {med([c['resume_tokens'] for c in costs]):,.0f} tokens, on the {left} unfinished; "
        f"the finished had spent {med([c['finished_tokens'] for c in costs]):,.0f})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.agents, args.rounds))
