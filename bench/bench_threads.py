"""What starting a turn of a long thread costs: continuing a 50-turn thread against a fresh run.

    python bench/bench_threads.py              # 50 turns, 15 repeats
    python bench/bench_threads.py --turns 100 --repeats 9

Builds `--repeats` threads of `--turns` turns each in one workspace with the default SQLite store
(each turn: a prompt of about 200 characters, one subagent whose summary is about 400, an answer
of about 1,200, as a chat with a lead that delegates makes them), then measures, in the same
process and in turn, a fresh run and a run continuing one of those threads' last run: the time
from `Runtime.run` to the lead's first model request (the model answers at once). The difference
is the store read (the previous run, its conversation checkpoint) and the fit of the longer
request, the target being at most 20 ms. Also: the store read alone (`conversation_of`), and
`fit_request` of the continued request cut to an 8,192-token window (the path a small model takes).
Reports medians, wall time, and the load average at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from delegate import LoopSettings, Runtime
from delegate.loop._fit import fit_request
from delegate.models import ModelProfile, ModelRequest, ModelResponse
from delegate.run._threads import conversation_of
from delegate.testing import FunctionModel, call, is_lead, reply

PROMPT = "Look at the next part of the service and tell me what to change, with the files to touch. " * 2
SUMMARY = "Read the handlers and their tests; the retry path drops the request id, see api/retry.py. " * 5
ANSWER = "The retry path loses the request id: pass it through `retry()` and log it on each attempt. " * 13


class Lead:
    """Every agent's model: the lead delegates once a turn and answers; the subagent completes.
    Notes when the lead's first request of a run arrives."""

    def __init__(self) -> None:
        self.first_request: float | None = None
        self.request: ModelRequest | None = None

    def __call__(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if not is_lead(request):
            return call("complete", summary=SUMMARY)
        if last.role == "user" and self.first_request is None:
            self.first_request = time.perf_counter()
            self.request = request
        if last.role == "user":
            return call("task", subagent_type="general-purpose", description="look", prompt="look at it")
        return reply(ANSWER)


async def timed(rt: Runtime, model: Lead, prompt: str, continue_from: str | None) -> tuple[float, str]:
    """Seconds from `run` to the lead's first request, and the run's id."""
    model.first_request = None
    start = time.perf_counter()
    result = await rt.run(prompt, continue_from=continue_from)
    assert result.status == "completed", result.error
    assert model.first_request is not None
    return model.first_request - start, result.run_id


async def main(turns: int, repeats: int) -> None:
    load = os.getloadavg()
    model = Lead()
    fake = FunctionModel(model, profile=ModelProfile(context_window=200_000))
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(model=fake, workspace=Path(tmp), loop=LoopSettings(heartbeat_interval=3600))
        store = rt.store
        assert store is not None
        began = time.perf_counter()
        lasts: list[str] = []
        for _ in range(repeats):
            last: str | None = None
            for n in range(turns):
                _, last = await timed(rt, model, f"{PROMPT} ({n})", last)
            assert last is not None
            lasts.append(last)
        built = time.perf_counter() - began
        previous = store.get_run(lasts[0])
        assert previous is not None
        messages = conversation_of(store, previous)
        chars = sum(len(m.text) + sum(len(getattr(p, "content", "")) for p in m.parts) for m in messages)
        print(f"built {repeats} threads of {turns} turns in {built:.1f} s", file=sys.stderr)
        print(f"each thread's conversation: {len(messages)} messages, {chars:,} characters")

        await timed(rt, model, PROMPT, None)  # warm-up: the first run builds what runs share
        fresh: list[float] = []
        continued: list[float] = []
        reads: list[float] = []
        fits: list[float] = []
        for last in lasts:
            fresh.append((await timed(rt, model, PROMPT, None))[0])
            row = store.get_run(last)
            assert row is not None
            start = time.perf_counter()
            conversation_of(store, row)
            reads.append(time.perf_counter() - start)
            continued.append((await timed(rt, model, PROMPT, last))[0])
            assert model.request is not None
            start = time.perf_counter()
            fit_request(model.request, 8_192)
            fits.append(time.perf_counter() - start)
        await rt.aclose()

    def ms(values: list[float]) -> float:
        return statistics.median(values) * 1000

    print(f"start of a fresh run (to the lead's first request): {ms(fresh):.2f} ms median")
    print(f"start of a turn continuing a {turns}-turn thread:     {ms(continued):.2f} ms median")
    print(f"  difference: {ms(continued) - ms(fresh):.2f} ms ({ms(continued) / ms(fresh):.2f}x); target <= 20 ms")
    print(f"  of which the store read (previous run + its conversation): {ms(reads):.2f} ms median")
    print(f"fit_request of the continued request to an 8,192-token window: {ms(fits):.2f} ms median")
    print(f"load average: {load[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end ({repeats} repeats)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.repeats))
