"""Layers through the Python API: a subagent that stops at its step limit or is cancelled applies
nothing and its layer is kept, old layers are swept after `RunLimits.layers_kept`, the view an
overlay subagent's tools have, and commands refused where no overlay can be mounted."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from delegate import CommandPolicy, Event, RunLimits, Runtime, Subagent, Workspace
from delegate._errors import ToolError
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply, respond
from delegate.tools import ToolContext
from delegate.tools._shell import bash
from delegate.workspace import CommandLimits, Layer
from delegate.workspace._command_limits import MIB

WRITER = Subagent(
    name="writer", description="writes", tools=["write_file", "read_file"], isolation="overlay", max_steps=2
)


def _lead_then(subagent: Any) -> FunctionModel:
    async def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="writer", description="w", prompt="write")
            return reply("ok")
        return await subagent(request)

    return FunctionModel(answer)


async def _writes_then_loops(request: ModelRequest) -> ModelResponse:
    return respond([("write_file", {"path": "a.txt", "content": "mine\n"}), ("read_file", {"path": "a.txt"})])


async def test_a_subagent_at_its_step_limit_applies_nothing_and_its_record_says_where_its_layer_is(
    tmp_path: Path,
) -> None:
    rt = Runtime(model=_lead_then(_writes_then_loops), workspace=tmp_path, subagents=[WRITER], store=False)
    result = await rt.run("go")
    (record,) = result.subagents
    assert (record.status, record.stop_reason, record.isolation) == ("aborted", "max_steps", "overlay")
    assert not (tmp_path / "a.txt").exists()
    assert record.layer is not None and (tmp_path / record.layer / "upper" / "a.txt").read_text() == "mine\n"
    assert [(c.path, c.op) for c in record.changes] == [("a.txt", "create")]
    assert record.to_dict()["layer"] == record.layer


async def test_a_cancelled_overlay_subagent_applies_nothing(tmp_path: Path) -> None:
    wrote = asyncio.Event()

    async def subagent(request: ModelRequest) -> ModelResponse:
        if len(request.messages) == 1:
            return call("write_file", path="b.txt", content="half\n")
        wrote.set()
        await asyncio.Event().wait()  # never answers: the run is cancelled meanwhile
        raise AssertionError("unreachable")

    events: list[Event] = []
    rt = Runtime(model=_lead_then(subagent), workspace=tmp_path, subagents=[WRITER], store=False, sinks=[events.append])
    running = asyncio.ensure_future(rt.run("go"))
    await wrote.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not (tmp_path / "b.txt").exists()
    ended = next(e for e in events if e.type == "subagent.completed")
    assert ended.data["status"] == "cancelled"
    assert list((tmp_path / ".delegate" / "layers").glob("*/sub1/upper/b.txt"))


async def test_kept_layers_are_swept_by_a_later_run_once_older_than_layers_kept(tmp_path: Path) -> None:
    rt = Runtime(model=_lead_then(_writes_then_loops), workspace=tmp_path, subagents=[WRITER], store=False)
    kept = (await rt.run("go")).subagents[0].layer
    assert kept is not None
    again = Runtime(model=FunctionModel(lambda r: reply("ok")), workspace=tmp_path, store=False)
    await again.run("hello")  # the default keeps a layer for a day
    assert (tmp_path / kept).is_dir()
    sweeping = Runtime(
        model=FunctionModel(lambda r: reply("ok")), workspace=tmp_path, store=False, limits=RunLimits(layers_kept=0)
    )
    await sweeping.run("hello")
    assert not (tmp_path / kept).exists()


def test_layers_kept_must_be_seconds() -> None:
    with pytest.raises(Exception, match="layers_kept"):
        RunLimits(layers_kept=-1)


def test_a_layer_shows_its_writes_over_the_workspace_and_records_what_it_first_saw(tmp_path: Path) -> None:
    from delegate.tools._files import _edit_file, _list_dir, _read_file, _write_file  # pyright: ignore[reportPrivateUsage]

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("one\n")
    workspace = Workspace.open(tmp_path)
    layer = Layer(root=workspace.root, run_id="r", agent_id="sub1")
    view = replace(workspace, layer=layer)
    _edit_file(view, "src/a.txt", "one", "uno", False)
    _write_file(view, "src/b.txt", "bee\n")
    (tmp_path / "src" / "c.txt").write_text("a sibling's\n")  # written to the workspace meanwhile
    assert "uno" in _read_file(view, "src/a.txt", 1, 10) and (tmp_path / "src" / "a.txt").read_text() == "one\n"
    assert _list_dir(view, "src").splitlines()[1:] == ["a.txt  4 B", "b.txt  4 B", "c.txt  12 B"]
    assert not (tmp_path / "src" / "b.txt").exists()
    assert set(layer.seen) == {"src/a.txt", "src/b.txt"} and layer.seen["src/b.txt"] is None


async def test_commands_of_an_overlay_subagent_are_refused_where_no_overlay_can_be_mounted(tmp_path: Path) -> None:
    workspace = Workspace.open(tmp_path, allow_commands=True, commands=CommandPolicy(sandbox=False))
    layer = Layer(root=workspace.root, run_id="r", agent_id="sub1")
    ctx = ToolContext(run_id="r", agent_id="sub1", workspace=replace(workspace, layer=layer), emit=lambda e: None)
    with pytest.raises(ToolError, match="need an overlay mount") as refused:
        await bash.run(ctx, {"command": "echo x > x.txt"})
    assert "its file tools still work" in str(refused.value)
    assert not (tmp_path / "x.txt").exists() and not os.path.exists(layer.upper / "x.txt")


async def test_a_follow_up_of_an_overlay_subagent_writes_in_a_layer_of_its_own_merged_when_it_completes(
    tmp_path: Path,
) -> None:
    writes_seen: dict[str, bool] = {}

    def answer(request: ModelRequest) -> ModelResponse:
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if is_lead(request):
            script = [
                call("task", subagent_type="writer", description="w", prompt="first", run_in_background=True),
                call("task_wait"),
                call("task_message", id="sub1", message="second"),
            ]
            return script[turns] if turns < len(script) else reply("ok")
        said = [m.text for m in request.messages if m.role == "user"]
        name = "first.txt" if len(said) == 1 else "second.txt"
        if request.messages[-1].role == "user":
            return call("write_file", path=name, content=f"{name}\n")
        writes_seen[name] = (tmp_path / name).exists()  # before it completes: only in its layer
        return call("complete", summary=f"wrote {name}", paths=[name])

    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, subagents=[WRITER], store=False)
    result = await rt.run("go")
    (record,) = result.subagents
    assert writes_seen == {"first.txt": False, "second.txt": False}
    assert (tmp_path / "first.txt").is_file() and (tmp_path / "second.txt").is_file()
    assert [(c.path, c.op) for c in record.changes] == [("second.txt", "create")]


QUOTA = CommandLimits(disk_quota=2 * MIB)


def test_a_layer_s_pending_writes_count_toward_the_disk_quota_of_the_file_tools(tmp_path: Path) -> None:
    from delegate.tools._files import _write_file  # pyright: ignore[reportPrivateUsage]

    workspace = Workspace.open(tmp_path, commands=CommandPolicy(limits=QUOTA))
    layer = Layer(root=workspace.root, run_id="r", agent_id="sub1")
    layer.upper.mkdir(parents=True)
    (layer.upper / "big.bin").write_bytes(b"x" * (3 * MIB // 2))  # what a command wrote in the layer
    with pytest.raises(ToolError, match="disk quota"):
        _write_file(replace(workspace, layer=layer), "more.bin", "y" * MIB)
    assert not (layer.upper / "more.bin").exists()


async def test_an_overlay_merge_that_would_pass_the_disk_quota_applies_nothing_and_says_so(tmp_path: Path) -> None:
    async def subagent(request: ModelRequest) -> ModelResponse:
        if len(request.messages) == 1:
            return respond([("write_file", {"path": f"big{n}.txt", "content": "z" * (MIB // 2)}) for n in range(3)])
        (tmp_path / "user.bin").write_bytes(b"u" * MIB)  # the workspace grew meanwhile
        return call("complete", summary="wrote three")

    writer = replace(WRITER, max_steps=5)
    policy = CommandPolicy(limits=QUOTA, sandbox=False)
    rt = Runtime(model=_lead_then(subagent), workspace=tmp_path, commands=policy, subagents=[writer], store=False)
    result = await rt.run("go")
    (record,) = result.subagents
    assert not list(tmp_path.glob("big*.txt"))  # nothing of the layer reached the workspace
    assert record.layer is not None and len(list((tmp_path / record.layer / "upper").glob("big*"))) == 3
    assert record.conflicts and all("disk quota" in c.reason for c in record.conflicts)
    assert not (tmp_path / "subagent-results").exists()  # its versions are not copied out past the quota
