"""An overlay subagent stopped or cancelled while its layer settles (merged, or its changes listed
and the layer kept): the settling runs in a thread, to its end, and what it found reaches the
subagent's record before the record ends, however many cancellations come meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from delegate import Event, Runtime
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import _task
from delegate.testing import FunctionModel, call, is_lead


class Held:
    """`_overlay.settle` as the runner calls it, held at its start until `release` is set: the real
    settling then runs. Whether each call ran on the event loop's thread is kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.on_loop: list[bool] = []
        real = _task.settle

        def held(*args: Any) -> Any:
            self.on_loop.append(_on_loop())
            self.entered.set()
            assert self.release.wait(60)
            return real(*args)

        monkeypatch.setattr(_task, "settle", held)


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


def _start_one() -> ModelResponse:
    task = {"subagent_type": "general-purpose", "description": "one", "prompt": "write one"}
    return call("task", **task, run_in_background=True, isolation="overlay")


async def test_a_stop_then_the_runs_cancel_during_a_merge_wait_for_it_and_the_merge_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sub1 completed and merges; the lead stops it (too late), then the run is cancelled: the
    second cancellation must not cut the wait short, or the record ends `completed` with no
    `workspace.merged` while the merge goes on in its thread."""
    held = Held(monkeypatch)
    never = asyncio.Event()
    events: list[Event] = []

    async def answer(request: ModelRequest) -> ModelResponse:
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if is_lead(request):
            if steps == 0:
                return _start_one()
            if steps == 1:
                await asyncio.to_thread(held.entered.wait, 60)
                return call("task_stop", id="sub1", reason="too late")
            await never.wait()
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
