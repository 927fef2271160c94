"""An overlay subagent stopped or cancelled while its layer settles (merged, or its changes listed
and the layer kept): the settling runs in a thread, to its end, and what it found reaches the
subagent's record before the record ends, however many cancellations come meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from delegate import Event, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import _runner
from delegate.testing import FunctionModel, call, is_lead


class Held:
    """`_overlay.settle` as `subagents/_runner.py` calls it, held at its start until `release` is set: the real
    settling then runs. Whether each call ran on the event loop's thread is kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.on_loop: list[bool] = []
        real = _runner.settle

        def held(*args: Any) -> Any:
            on_loop = _on_loop()
            self.on_loop.append(on_loop)
            self.entered.set()
            if not on_loop:  # held on the loop, it would hold the test too: it is told by `on_loop`
                assert self.release.wait(60)
            return real(*args)

        monkeypatch.setattr(_runner, "settle", held)


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _task_of(agent_id: str) -> asyncio.Task[Any]:
    return next(t for t in asyncio.all_tasks() if t.get_name() == f"delegate-{agent_id}")


async def _cancelled(task: asyncio.Task[Any], times: int) -> None:
    """Until `task` has been asked to cancel `times` times (a yield a turn, no clock)."""
    while task.cancelling() < times and not task.done():
        await asyncio.sleep(0)


async def _lead(steps: int, ready: Callable[[], Awaitable[Any]]) -> ModelResponse:
    """The lead: starts sub1 (an overlay subagent) in the background, stops it once `ready`, and
    waits for ever (until the run is cancelled)."""
    if steps == 0:
        task = {"subagent_type": "general-purpose", "description": "one", "prompt": "write one"}
        return call("task", **task, run_in_background=True, isolation="overlay")
    if steps == 1:
        await ready()
        return call("task_stop", id="sub1", reason="enough")
    await asyncio.Event().wait()
    raise AssertionError("never answers")


async def test_a_stop_then_the_runs_cancel_during_a_merge_wait_for_it_and_the_merge_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sub1 completed and merges; the lead stops it (too late), then the run is cancelled: the
    second cancellation must not cut the wait short, or the record ends `completed` with no
    `workspace.merged` while the merge goes on in its thread."""
    held = Held(monkeypatch)
    events: list[Event] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if is_lead(request):
            return await _lead(steps, lambda: asyncio.to_thread(held.entered.wait, 60))
        if steps == 0:
            return call("write_file", path="one.txt", content="one\n")
        return call("complete", summary="wrote one")

    run = asyncio.create_task(
        Runtime(model=FunctionModel(answer), workspace=tmp_path, store=False, sinks=[events.append]).run("go")
    )
    await asyncio.to_thread(held.entered.wait, 60)
    sub1 = _task_of("sub1")
    await _cancelled(sub1, 1)  # the stop
    run.cancel()  # then the run's cancel, which cancels sub1 again
    await _cancelled(sub1, 2)
    held.release.set()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    ended = [(e.type, e.data.get("status")) for e in events if e.agent_id == "sub1"]
    assert ("workspace.merged", None) in ended
    assert ended.index(("workspace.merged", None)) < ended.index(("subagent.completed", "completed"))
    merged = next(e for e in events if e.type == "workspace.merged")
    assert [c["path"] for c in merged.data["changes"]] == ["one.txt"]
    assert (tmp_path / "one.txt").read_text() == "one\n"
    assert held.on_loop == [False]


async def test_a_stopped_overlay_subagents_layer_is_settled_off_the_loop_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sub1 wrote in its layer and works on when the lead stops it: what its layer holds is
    listed (a walk and diffs) in a thread, not on the loop every other subagent runs on; then the
    run's cancel comes too, and the record still lists it before it ends."""
    held = Held(monkeypatch)
    works, never = asyncio.Event(), asyncio.Event()
    events: list[Event] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if is_lead(request):
            return await _lead(steps, works.wait)
        if steps == 0:
            return call("write_file", path="one.txt", content="one\n")
        works.set()
        await never.wait()  # works until stopped
        raise AssertionError("never answers")

    run = asyncio.create_task(
        Runtime(model=FunctionModel(answer), workspace=tmp_path, store=False, sinks=[events.append]).run("go")
    )
    await asyncio.to_thread(held.entered.wait, 60)
    assert held.on_loop == [False]
    sub1 = _task_of("sub1")
    run.cancel()  # the stop came first (taken: its layer settles), then the run's cancel
    await _cancelled(sub1, 1)
    held.release.set()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    (ended,) = [e.data for e in events if e.type == "subagent.completed" and e.agent_id == "sub1"]
    assert (ended["status"], ended["stop_reason"]) == ("cancelled", "stopped")
    assert not (tmp_path / "one.txt").exists()  # a stopped subagent's layer is kept, not merged
    (kept,) = list((tmp_path / ".delegate" / "layers").glob("*/sub1/upper/one.txt"))
    assert kept.read_text() == "one\n"
