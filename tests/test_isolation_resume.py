"""An overlay subagent whose run is killed before it completes starts afresh on resume: what its
killed attempt wrote in its layer never reaches the workspace, nor its record."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Any

from delegate import Runtime, Store, ToolCallPart, Usage, Workspace
from delegate._store import RunRow
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply
from delegate.tools import never_merged
from delegate.workspace import Layer, layer_changes
from delegate.workspace._merge import _stage  # pyright: ignore[reportPrivateUsage]
from tests.cli_support import run_cli
from tests.durable_support import cli_env, only_run, run_json, wait_for
from tests.loopback_openai import OpenAIServer, Reply
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture

ARGS = ("--model", "openai:m", "--json")


class Attempts:
    """The lead starts one overlay subagent. Its first attempt writes `first.md`, then hangs
    (`hanging` is set); any later attempt writes `second.md` and completes: a model that answers
    otherwise when asked again."""

    def __init__(self) -> None:
        self.attempts = 0
        self.hanging = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if is_lead(body):
            if turns == 0:
                task = {"subagent_type": "general-purpose", "description": "notes", "prompt": "write notes"}
                return Reply(tool_calls=[("task", task | {"isolation": "overlay"})], prompt_tokens=10)
            return Reply(content="done", prompt_tokens=20)
        if turns == 0:
            self.attempts += 1
            name = "first.md" if self.attempts == 1 else "second.md"
            return Reply(tool_calls=[("write_file", {"path": name, "content": "notes\n"})], prompt_tokens=5)
        if self.attempts == 1:
            self.hanging.set()
            self.release.wait(60)
        return Reply(tool_calls=[("complete", {"summary": "wrote notes"})], prompt_tokens=6)


def _killed_hanging(procs: Processes, model: Attempts, env: dict[str, str], store: Store, root: Path) -> RunRow:
    """`delegate run` of `model`, SIGKILLed while its subagent's first attempt hangs: its run."""
    proc = procs.spawn(["run", "write notes", *ARGS, "-w", str(root)], env, root / "run.log")
    assert model.hanging.wait(60)
    run = wait_for(lambda: only_run(store), what="the run to be recorded")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return run


def test_an_overlay_subagent_killed_before_it_completes_starts_afresh_on_resume(
    procs: Processes, tmp_path: Path
) -> None:
    model = Attempts()
    try:
        with OpenAIServer(model) as server, Store.for_workspace(tmp_path) as store:
            env = cli_env(server.base_url)
            run = _killed_hanging(procs, model, env, store, tmp_path)
            model.release.set()
            result = run_json(run_cli(["run", "--resume", run.id, *ARGS, "-w", str(tmp_path)], env=env))
    finally:
        model.release.set()
    (record,) = result["subagents"]
    assert record["status"] == "completed"
    assert [c["path"] for c in record["changes"]] == ["second.md"]
    assert (tmp_path / "second.md").exists()
    assert not (tmp_path / "first.md").exists()  # the killed attempt's write, never merged


def test_a_merge_a_kill_cut_short_is_finished_on_resume_and_its_subagents_record_lists_it(
    procs: Processes, tmp_path: Path
) -> None:
    """The killed attempt had decided its merge (journalled) when the kill came: the resume
    finishes it, and the record of the subagent, which starts afresh, lists that change too."""
    model = Attempts()
    try:
        with OpenAIServer(model) as server, Store.for_workspace(tmp_path) as store:
            env = cli_env(server.base_url)
            run = _killed_hanging(procs, model, env, store, tmp_path)
            layer = Layer(root=tmp_path, run_id=run.id, agent_id="sub1")
            _stage(layer, layer_changes(layer, never_merged(Workspace.open(tmp_path))))  # as a kill mid-merge leaves it
            model.release.set()
            result = run_json(run_cli(["run", "--resume", run.id, *ARGS, "-w", str(tmp_path)], env=env))
            events = [e for e in store.events(run.id) if e.type == "workspace.merged"]
    finally:
        model.release.set()
    (record,) = result["subagents"]
    assert (tmp_path / "first.md").exists() and (tmp_path / "second.md").exists()
    assert [(c["path"], c["op"]) for c in record["changes"]] == [("first.md", "create"), ("second.md", "create")]
    assert [[c["path"] for c in e.data["changes"]] for e in events] == [["first.md"], ["second.md"]]
    assert events[0].data["recovered"] is True and events[0].agent_id == "sub1"


async def test_a_stop_that_comes_while_a_completed_subagent_merges_is_too_late_and_its_record_says_so(
    tmp_path: Path,
) -> None:
    """The lead stops a background overlay subagent once it completed and its merge is decided
    (journalled, in its thread): the merge goes on to the end, and the record says what happened,
    `completed` with its changes, never `stopped` (which applies nothing) over a merged change."""
    files = 2000  # enough for the merge to take a while
    root = tmp_path

    async def answer(request: ModelRequest) -> ModelResponse:
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if is_lead(request):
            if steps == 0:
                task = {"subagent_type": "general-purpose", "description": "many", "prompt": "write many"}
                return call("task", **task, run_in_background=True, isolation="overlay")
            if steps == 1:
                while not list((root / ".delegate" / "layers").glob("*/sub1/journal.json")):
                    await asyncio.sleep(0.0005)
                return call("task_stop", id="sub1", reason="too late")
            if steps == 2:
                return call("task_wait", ids=["sub1"])
            return reply("done")
        if steps == 0:
            writes = [
                ToolCallPart(id=f"w{i}", name="write_file", arguments={"path": f"f/{i}.txt", "content": f"{i}\n"})
                for i in range(files)
            ]
            return ModelResponse(parts=writes, usage=Usage(input_tokens=1, output_tokens=1, requests=1), model="t")
        return call("complete", summary="wrote many")

    result = await Runtime(model=FunctionModel(answer), workspace=root, store=False).run("write many files")
    (record,) = result.subagents
    assert len(list((root / "f").glob("*.txt"))) == files  # merged whole
    assert (record.status, record.stop_reason, record.layer) == ("completed", "stop_tool", None)
    assert len(record.changes) == files
