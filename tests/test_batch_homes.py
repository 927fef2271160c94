"""Batches stay with their files (issue 34, item 7): a batch records the folder it was submitted
in, as a run does, and a worker whose folder is another (on the same store) leaves its items to a
worker of that folder instead of running them where their files are not. On SQLite and
PostgreSQL, through the real `Runtime` as a batch worker's runner."""

from __future__ import annotations

import asyncio
from pathlib import Path

from delegate import Runtime, Store
from delegate.batch import Batches
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call
from delegate.workspace import Home
from tests.batch_support import QueueLooks, items, worker
from tests.workflow_support import finished, task_of


def writing(request: ModelRequest) -> ModelResponse:
    """Each item writes `out/<its task's last word>.md` in its workspace, then completes."""
    name = task_of(request).split()[-1]
    if finished(request):
        return call("complete", summary=f"wrote out/{name}.md")
    return call("write_file", path=f"out/{name}.md", content=f"notes on {name}\n")


def folder(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir()
    return root


async def test_a_worker_of_another_folder_leaves_a_batch_to_a_worker_of_its_own(store: Store, tmp_path: Path) -> None:
    here, there = folder(tmp_path, "here"), folder(tmp_path, "there")
    batches = Batches(store)
    batch = batches.submit("default", subagent_type="general-purpose", items=items(3), home=Home.of(here)).batch
    model = FunctionModel(writing)

    looks = QueueLooks()
    async with Runtime(model=model, workspace=there, store=False) as elsewhere, worker(batches, elsewhere, looks=looks):
        deadline = asyncio.get_running_loop().time() + 30
        while looks.passes < 5:  # it looked at the queue five times, and left the batch each time
            assert asyncio.get_running_loop().time() < deadline, "the worker never looked at the queue"
            await asyncio.sleep(0.02)
    assert looks.claims == []  # it claimed nothing
    assert batches.get("default", batch.id).counts.get("queued") == 3
    assert not (there / "out").exists()

    async with Runtime(model=model, workspace=here, store=False) as own, worker(batches, own) as running:
        done = await asyncio.wait_for(running.wait("default", batch.id), 60)

    assert done.status == "completed" and done.counts.get("succeeded") == 3
    assert sorted(p.name for p in (here / "out").iterdir()) == ["0.md", "1.md", "2.md"]
    assert not (there / "out").exists()


async def test_a_batch_submitted_before_batches_had_a_folder_runs_in_any_workers(store: Store, tmp_path: Path) -> None:
    there = folder(tmp_path, "there")
    batches = Batches(store)
    batch = batches.submit("default", subagent_type="general-purpose", items=items(1)).batch

    async with Runtime(model=FunctionModel(writing), workspace=there, store=False) as rt, worker(batches, rt) as w:
        done = await asyncio.wait_for(w.wait("default", batch.id), 60)

    assert done.status == "completed" and (there / "out" / "0.md").exists()
