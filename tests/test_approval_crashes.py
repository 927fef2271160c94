"""Calls that wait for a person, when their run is killed or ends: a call is listed as waiting only
while a run could still run it, and a decision is never taken for a call that will not run."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Permissions, Runtime, Store, UserError
from delegate._record import ApprovalRow
from delegate._time import utc_now
from delegate.models import ModelRequest, ModelResponse
from delegate.run import stored_result
from delegate.testing import FunctionModel, call, is_lead, reply
from tests.approvals_support import Writers, waiting_calls
from tests.cli_support import delegate
from tests.durable_support import cli_env, only_run, run_json, wait_for
from tests.loopback_openai import OpenAIServer, Reply
from tests.security.test_approval_identity import ASK_WRITE, _with_id
from tests.test_background_cli import user_texts
from tests.test_permissions import writing_subagent
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture


def _asked(store: Store, run_id: str, call_id: str = "call_1") -> ApprovalRow:
    row = ApprovalRow(
        run_id=run_id,
        call_id=call_id,
        agent_id="sub1",
        tool="write_file",
        arguments={"path": "notes.md"},
        rule="Write",
        requested_at=utc_now(),
    )
    return store.request_approval(row)


@pytest.mark.parametrize("end", ["completed", "cancelled", "error", "timed_out"])
def test_a_call_still_waiting_when_its_run_ends_is_closed_denied_and_takes_no_decision(store: Store, end: str) -> None:
    run = store.create_run(prompt="p", model="m")
    _asked(store, run.id)
    assert store.finish_run(run.id, end)  # type: ignore[arg-type]
    assert store.approvals(run.id, pending=True) == []
    (closed,) = store.approvals(run.id)
    assert closed.decision == "deny" and closed.reason == f"the run ended ({end}) before anyone decided"
    assert store.get_run(run.id).waiting == 0  # type: ignore[union-attr]
    with pytest.raises(UserError, match="decided already"):
        store.decide_approval(run.id, "call_1", "approve")
    shown = stored_result(store, run.id)
    assert shown is not None and shown.pending_approvals == []


def test_cancelling_an_interrupted_run_closes_its_waiting_calls_and_keeps_the_decided_ones(store: Store) -> None:
    run = store.create_run(prompt="p", model="m", owner="here|1|a")
    _asked(store, run.id, "call_1")
    _asked(store, run.id, "call_2")
    store.decide_approval(run.id, "call_2", "approve", "fine")
    assert store.release_run(run.id, "here|1|a")  # its process let it go: `interrupted`
    assert store.get_run(run.id).status == "interrupted"  # type: ignore[union-attr]
    assert store.request_cancel(run.id).status == "cancelled"
    decided = {a.call_id: (a.decision, a.reason) for a in store.approvals(run.id)}
    assert decided == {
        "call_1": ("deny", "the run ended (cancelled) before anyone decided"),
        "call_2": ("approve", "fine"),
    }
    assert store.get_run(run.id).waiting == 0  # type: ignore[union-attr]


async def test_a_run_cancelled_while_a_call_waits_lists_no_call_waiting(tmp_path: Path) -> None:
    rt = Runtime(
        model=writing_subagent(), workspace=tmp_path, extensions=Extensions(permissions=Permissions(ask=["Write"]))
    )
    run = asyncio.create_task(rt.run("write notes"))
    store = rt.store
    assert store is not None
    while not (runs := store.list_runs()) or not store.approvals(runs[0].id, pending=True):
        await asyncio.sleep(0.01)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    shown = stored_result(store, runs[0].id)
    assert shown is not None and shown.status == "cancelled" and shown.pending_approvals == []
    with pytest.raises(UserError, match="decided already"):
        await rt.decide(runs[0].id, store.approvals(runs[0].id)[0].call_id, approve=True)
    assert not (tmp_path / "notes.md").exists()


@contextmanager
def killed_while_waiting(
    procs: Processes, store_url: str, root: Path
) -> Iterator[tuple[dict[str, str], Store, ApprovalRow]]:
    """`delegate run --ask Write` of `Writers("notes.md")` on `store_url`, SIGKILLed while its
    subagent's write waits for a person (its answers so far stored): the environment that reaches
    the loopback server (up while the block runs), the store, and the call that waited."""
    with OpenAIServer(Writers("notes.md")) as server, Store.open(store_url) as store:
        env = cli_env(server.base_url, db=store_url)
        args = ["run", "write notes", "--model", "openai:m", "--json", "--ask", "Write", "-w", str(root)]
        proc = procs.spawn(args, env, root / "run.log")
        (call,) = waiting_calls(store)
        wait_for(lambda: len(store.checkpoints(call.run_id)) >= 2, what="the answers so far to be stored")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        yield env, store, call


def test_a_run_killed_while_waiting_then_cancelled_asks_nobody_and_runs_nothing(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    with killed_while_waiting(procs, store_url, tmp_path) as (env, store, call):

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(delegate(*args), env=env, capture_output=True, text=True, timeout=120)

        shown = run_json(cli("runs", "show", call.run_id, "--json", "-w", str(tmp_path)))
        assert shown["status"] == "interrupted" and len(shown["pending_approvals"]) == 1  # it may still be decided
        assert cli("runs", "cancel", call.run_id, "-w", str(tmp_path)).returncode == 0
        shown = run_json(cli("runs", "show", call.run_id, "--json", "-w", str(tmp_path)))
        assert shown["status"] == "cancelled" and shown["pending_approvals"] == []
        approved = cli("runs", "approve", call.run_id, "--all", "-w", str(tmp_path))
        assert approved.returncode == 2 and "has no call waiting for a decision" in approved.stderr
        refused = cli("runs", "approve", call.run_id, call.call_id, "-w", str(tmp_path))
        assert refused.returncode == 2 and "decided already" in refused.stderr
        assert [(a.decision, a.reason) for a in store.approvals(call.run_id)] == [
            ("deny", "the run ended (cancelled) before anyone decided")
        ]
    assert not (tmp_path / "notes.md").exists()


async def test_a_subagent_stopped_while_its_call_waits_leaves_no_call_waiting(tmp_path: Path) -> None:
    looked = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelResponse:
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if not is_lead(request):
            return call("write_file", path="notes.md", content="notes\n")
        if steps == 0:
            task = {"subagent_type": "general-purpose", "description": "notes", "prompt": "write notes"}
            return call("task", **task, run_in_background=True)
        if steps == 1:
            return call("task_wait", ids=["sub1"])
        await looked.wait()  # the test looks at the store while the run goes on
        return reply("done")

    rt = Runtime(
        model=FunctionModel(answer), workspace=tmp_path, extensions=Extensions(permissions=Permissions(ask=["Write"]))
    )
    run = asyncio.create_task(rt.run("write notes"))
    store = rt.store
    assert store is not None
    while not (runs := store.list_runs()) or not store.approvals(runs[0].id, pending=True):
        await asyncio.sleep(0.01)
    run_id = runs[0].id
    while not any(e.type == "subagent.started" and e.agent_id == "sub1" for e in store.events(run_id)):
        await asyncio.sleep(0.01)  # stored a moment after it happens: a stop before that is refused
    store.request_stop(run_id, "sub1", "not now")
    while not any(s.status == "cancelled" for s in store.subagent_records(run_id)):
        await asyncio.sleep(0.01)
    try:
        live = store.get_run(run_id)
        assert live is not None and live.status == "running"  # nothing waits for a person now
        assert store.approvals(run_id, pending=True) == []
        (closed,) = store.approvals(run_id)
        assert closed.decision == "deny" and closed.reason == "sub1 was stopped before anyone decided"
    finally:
        looked.set()
    assert (await run).status == "completed"
    assert not (tmp_path / "notes.md").exists()


ALWAYS_RUN = """
import asyncio, sys
from delegate import Extensions, Permissions, Runtime

rt = Runtime(model="openai:m", workspace=sys.argv[1], extensions=Extensions(permissions=Permissions(ask=["Write"])))

def decide(event):  # what a person answering "always" on the terminal does
    if event.type == "approval.requested":
        call_id = event.data["call_id"]
        asyncio.get_running_loop().create_task(rt.decide(event.run_id, call_id, approve=True, always=True))

asyncio.run(rt.run("write two notes", sinks=[decide]))
"""


class TwoWrites:
    """The lead delegates a write of `a.md`, then (once `release` is set) one of `b.md`; each
    subagent writes its file and completes. `holding` is set while the lead's second answer waits."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        steps = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if is_lead(body):
            if steps == 1:
                self.holding.set()
                self.release.wait(60)
            if steps < 2:
                task = {"subagent_type": "general-purpose", "description": "notes", "prompt": f"write {'ab'[steps]}.md"}
                return Reply(tool_calls=[("task", task)], prompt_tokens=10)
            return Reply(content="done", prompt_tokens=10)
        path = user_texts(body)[0].split()[1]
        if steps == 0:
            return Reply(tool_calls=[("write_file", {"path": path, "content": "notes\n"})], prompt_tokens=5)
        return Reply(tool_calls=[("complete", {"summary": f"wrote {path}"})], prompt_tokens=5)


def test_a_rule_approved_always_stays_approved_after_the_run_is_killed_and_resumed(
    procs: Processes, tmp_path: Path
) -> None:
    model = TwoWrites()
    try:
        with OpenAIServer(model) as server, Store.for_workspace(tmp_path) as store:
            env = cli_env(server.base_url)
            with (tmp_path / "first.log").open("w") as log:
                first = subprocess.Popen(
                    [sys.executable, "-c", ALWAYS_RUN, str(tmp_path)], env=env, stdout=log, stderr=subprocess.STDOUT
                )
            procs.started.append(first)
            assert model.holding.wait(60)  # a.md approved "always" and written; the lead's next answer waits
            run = wait_for(lambda: only_run(store), what="the run")
            wait_for(lambda: store.subagent_records(run.id), what="a.md's subagent to be stored")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
            model.release.set()
            resumed = procs.spawn(
                ["run", "--resume", run.id, "--model", "openai:m", "--json", "--ask", "Write", "-w", str(tmp_path)],
                env,
                tmp_path / "resumed.log",
            )
            wait_for(
                lambda: resumed.poll() is not None or store.approvals(run.id, pending=True),
                what="the resumed run to end, or to ask",
            )
            assert store.approvals(run.id, pending=True) == []  # b.md's write was not asked about
            assert resumed.wait(timeout=60) == 0
            decided = [(a.arguments["path"], a.decision, a.reason) for a in store.approvals(run.id)]
    finally:
        model.release.set()
    assert (tmp_path / "a.md").exists() and (tmp_path / "b.md").exists()
    # "always" is kept in the decision's own row, stored in the statement that stores the decision:
    # no moment after it when a kill loses it (a checkpoint queued for the writer would leave one)
    assert decided == [("a.md", "approve", "always"), ("b.md", "approve", "always")]


class FollowUpWrites:
    """The lead has a subagent look around (in the background), waits for it, then sends it a
    follow-up that writes `notes.md` (a call that waits under `--ask Write`). `bodies` keeps every
    request."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.bodies.append(body)
        steps = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if is_lead(body):
            if steps == 0:
                task = {"subagent_type": "general-purpose", "description": "notes", "prompt": "look around"}
                return Reply(tool_calls=[("task", task | {"run_in_background": True})], prompt_tokens=10)
            if steps == 1:
                return Reply(tool_calls=[("task_wait", {"ids": ["sub1"]})], prompt_tokens=10)
            if steps == 2:
                return Reply(tool_calls=[("task_message", {"id": "sub1", "message": "now write notes.md"})])
            return Reply(content="done", prompt_tokens=10)
        said = user_texts(body)
        if len(said) == 1:
            return Reply(tool_calls=[("complete", {"summary": "looked"})], prompt_tokens=5)
        if body["messages"][-1]["role"] == "user":
            return Reply(tool_calls=[("write_file", {"path": "notes.md", "content": "notes\n"})], prompt_tokens=7)
        return Reply(tool_calls=[("complete", {"summary": "wrote notes.md"})], prompt_tokens=5)

    def follow_up_openings(self) -> int:
        """How many times the follow-up's first answer was asked for."""
        return sum(1 for b in self.bodies if len(user_texts(b)) == 2 and b["messages"][-1]["role"] == "user")


def test_a_follow_up_killed_while_its_call_waits_is_not_asked_again_on_resume(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    model = FollowUpWrites()
    with OpenAIServer(model) as server, Store.open(store_url) as store:
        env = cli_env(server.base_url, db=store_url)
        args = ["--model", "openai:m", "--json", "--ask", "Write", "-w", str(tmp_path)]
        proc = procs.spawn(["run", "notes", *args], env, tmp_path / "run.log")
        (call,) = waiting_calls(store)
        follow_up = next(c.key for c in store.checkpoints(call.run_id) if c.kind == "subagent") + "+1/1"
        wait_for(lambda: store.checkpoint(call.run_id, "answer", follow_up), what="the follow-up's answer to be stored")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        store.decide_approval(call.run_id, call.call_id, "approve")
        resumed = procs.spawn(["run", "--resume", call.run_id, *args], env, tmp_path / "resumed.log")
        wait_for(
            lambda: resumed.poll() is not None or store.approvals(call.run_id, pending=True),
            what="the resumed run to end, or to ask",
        )
        assert store.approvals(call.run_id, pending=True) == []  # the decision given was found: nobody asked again
        assert resumed.wait(timeout=60) == 0
        decisions = [a.decision for a in store.approvals(call.run_id)]
    result = json.loads((tmp_path / "resumed.log").read_text().strip().splitlines()[-1])
    assert result["status"] == "completed"
    (record,) = result["subagents"]
    assert (record["status"], record["messages"], record["summary"]) == ("completed", 1, "wrote notes.md")
    assert model.follow_up_openings() == 1  # its answer before the wait was not asked (nor paid for) again
    assert decisions == ["approve"]
    assert (tmp_path / "notes.md").read_text() == "notes\n"


async def test_a_decision_on_a_call_whose_id_another_subagent_shares_is_found_again_after_a_resume(
    tmp_path: Path,
) -> None:
    """Two subagents gave their writes one id: sub2 asked first and kept it, sub1 was asked for
    under an id of its own, which a person approved while the run was down (the rows are stored
    as such a run left them). On resume sub1 asks first: it finds its decision, and only sub2's
    call, undecided, is asked for again."""
    second_may_ask = asyncio.Event()

    async def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                prompts = ["write b.md", "write a.md"]
                return call("task", subagent_type="general-purpose", description="notes", prompts=prompts)
            return reply("done")
        path = request.messages[0].text.split()[1]
        if request.messages[-1].tool_results:
            return call("complete", summary="wrote")
        if path == "a.md":
            await second_may_ask.wait()  # sub1 asks first
        return _with_id("call_0", "write_file", path=path, content=f"{path}\n")

    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, extensions=ASK_WRITE)
    store = rt.store
    assert store is not None
    run = store.create_run(prompt="write notes", model="test:function", owner="gone|1|a")
    asked: dict[str, Any] = {"tool": "write_file", "rule": "Write", "requested_at": utc_now()}
    for call_id, agent, path in (("call_0", "sub2", "a.md"), ("call_0_2", "sub1", "b.md")):
        arguments = {"path": path, "content": f"{path}\n"}
        store.request_approval(
            ApprovalRow(run_id=run.id, call_id=call_id, agent_id=agent, arguments=arguments, **asked)
        )
    store.decide_approval(run.id, "call_0_2", "approve")
    assert store.release_run(run.id, "gone|1|a")
    before = utc_now()
    resumed = asyncio.create_task(rt.resume(run.id))

    async def asked_since(done: Callable[[], bool] = lambda: False) -> list[ApprovalRow]:
        """The calls the resumed run asked for (not those left by the run it resumes), once there
        are some, or `done()`."""
        while not resumed.done() and not done():
            found = [a for a in store.approvals(run.id, pending=True) if a.requested_at > before]
            if found:
                return found
            await asyncio.sleep(0.01)
        return []

    assert await asked_since(lambda: (tmp_path / "b.md").exists()) == []  # sub1 ran on its decision, unasked
    second_may_ask.set()
    (waiting,) = await asked_since()
    assert (waiting.agent_id, waiting.arguments["path"]) == ("sub2", "a.md")  # undecided: asked again
    await rt.decide(run.id, waiting.call_id, approve=True)
    assert (await resumed).status == "completed"
    assert (tmp_path / "a.md").exists() and (tmp_path / "b.md").exists()
    decided = sorted((r.arguments["path"], r.decision) for r in store.approvals(run.id))
    assert decided == [("a.md", "approve"), ("b.md", "approve")]
