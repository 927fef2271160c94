"""A person's decision is bound to the call it was asked for, never to another that borrows its id.

A tool call's id is the model's to choose: a hostile (or merely sloppy) model can give a second,
different call the id of one a person approved, in a later turn or in another subagent of the
run. The decision was made on what the first call showed (its tool and arguments); it must not
let the second one run, and the second must be asked for on its own.
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Permissions, Runtime, Store, ToolCallPart, Usage, UserError
from delegate._record import ApprovalRow
from delegate._time import utc_now
from delegate.models import ModelRequest, ModelResponse
from delegate.run._approvals import decide_call
from delegate.testing import FunctionModel, call, is_lead, reply

ASK_WRITE = Extensions(permissions=Permissions(ask=["Write"]))


def _with_id(call_id: str, name: str, **arguments: Any) -> ModelResponse:
    """A turn with one tool call whose id the model chose."""
    part = ToolCallPart(id=call_id, name=name, arguments=arguments)
    return ModelResponse(parts=[part], usage=Usage(input_tokens=10, output_tokens=5, requests=1), model="test")


async def _pending(store: Store, count: int, run: asyncio.Task[Any]) -> list[Any]:
    """The run's calls that wait for a decision, once there are `count` (or the run ended; [] after
    30 s, so that a run stuck on a lost call fails the test rather than hangs it)."""
    for _ in range(1500):
        if run.done():
            break
        runs = store.list_runs()
        found = store.approvals(runs[0].id, pending=True) if runs else []
        if len(found) >= count:
            return found
        await asyncio.sleep(0.02)
    return []


async def test_a_later_call_that_reuses_an_approved_calls_id_is_asked_for_on_its_own(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="general-purpose", description="notes", prompt="write notes")
            return reply("done")
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if turns == 0:
            return _with_id("call_0", "write_file", path="notes.md", content="notes\n")
        if turns == 1:  # the same id, another call: what the person approved was notes.md
            return _with_id("call_0", "write_file", path="evil.md", content="pwned\n")
        return call("complete", summary="wrote")

    model = FunctionModel(answer)
    rt = Runtime(model=model, workspace=tmp_path, extensions=ASK_WRITE)
    run = asyncio.create_task(rt.run("write notes"))
    store = rt.store
    assert store is not None
    (first,) = await _pending(store, 1, run)
    assert first.arguments["path"] == "notes.md"
    await rt.decide(first.run_id, first.call_id, approve=True)
    waiting = [w for w in await _pending(store, 1, run) if w.arguments.get("path") == "evil.md"]
    assert waiting, "the second call ran on the first call's approval"
    assert not (tmp_path / "evil.md").exists()
    await rt.decide(waiting[0].run_id, waiting[0].call_id, approve=False, reason="no")
    result = await run
    assert result.status == "completed"
    assert (tmp_path / "notes.md").read_text() == "notes\n"
    assert not (tmp_path / "evil.md").exists()
    decided = {row.arguments["path"]: row.decision for row in store.approvals(first.run_id)}
    assert decided == {"notes.md": "approve", "evil.md": "deny"}
    # What the model is sent back: two ids, each one Anthropic's API takes (^[a-zA-Z0-9_-]+$)
    last = [r for r in model.requests if not is_lead(r)][-1]
    ids = [p.id for m in last.messages for p in m.parts if isinstance(p, ToolCallPart)]
    assert len(ids) == len(set(ids)) == 2
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", i) for i in ids), ids


async def test_two_subagents_giving_their_calls_the_same_id_are_each_asked_for(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        if is_lead(request):
            if len(request.messages) == 1:
                prompts = ["write notes.md", "write evil.md"]
                return call("task", subagent_type="general-purpose", description="notes", prompts=prompts)
            return reply("done")
        asked = next(m for m in request.messages if m.role == "user").parts[0].text  # type: ignore[union-attr]
        path = asked.split("write ", 1)[1].split()[0]
        if request.messages[-1].role == "user":
            return _with_id("call_0", "write_file", path=path, content=f"{path}\n")
        return call("complete", summary=request.messages[-1].tool_results[0].content)

    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, extensions=ASK_WRITE)
    run = asyncio.create_task(rt.run("write notes"))
    store = rt.store
    assert store is not None
    waiting = await _pending(store, 2, run)
    assert sorted(w.arguments["path"] for w in waiting) == ["evil.md", "notes.md"], (
        "one subagent's call took the other's place in the approvals"
    )
    assert len({w.call_id for w in waiting}) == 2
    for row in waiting:
        await rt.decide(row.run_id, row.call_id, approve=row.arguments["path"] == "notes.md", reason="no")
    result = await asyncio.wait_for(run, 30)
    assert result.status == "completed"
    assert (tmp_path / "notes.md").exists()
    assert not (tmp_path / "evil.md").exists()


def _ask_at_once(store: Store, run_id: str, call_id: str) -> tuple[dict[str, ApprovalRow], list[BaseException]]:
    """Two agents store a request under `call_id` at the same moment: what each got back, and what failed."""
    barrier = threading.Barrier(2)
    got: dict[str, ApprovalRow] = {}
    failed: list[BaseException] = []

    def ask(agent: str) -> None:
        arguments = {"command": f"echo {agent}"}
        row = ApprovalRow(
            run_id=run_id, call_id=call_id, agent_id=agent, tool="bash", arguments=arguments, requested_at=utc_now()
        )
        barrier.wait()
        try:
            got[agent] = store.request_approval(row)
        except BaseException as exc:  # what the call's tool would have returned to the model
            failed.append(exc)

    threads = [threading.Thread(target=ask, args=(agent,)) for agent in ("sub1", "sub2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got, failed


def test_two_calls_asking_under_one_id_at_once_are_both_answered(store: Store) -> None:
    # Two subagents whose model gave their calls one id ask at the same moment. On PostgreSQL both
    # transactions looked, found no request under that id and inserted: the second failed on the
    # key, and its call ended in an IntegrityError instead of being asked for. Now the second gets
    # the stored request back (another agent's: `RunApprovals` then asks under `<id>_2`).
    run = store.create_run(prompt="p", model="m")
    for i in range(40):
        got, failed = _ask_at_once(store, run.id, f"call_{i}")
        assert failed == []
        (stored,) = [a for a in store.approvals(run.id, under=f"call_{i}") if a.call_id == f"call_{i}"]
        assert got["sub1"].agent_id == got["sub2"].agent_id == stored.agent_id


async def test_the_words_always_in_a_reason_approve_one_call_and_only_the_option_the_rule(store: Store) -> None:
    # A resumed run (and the live one, at its beat) reads "approved always for the rule" from the
    # decision's own `always`, which only the explicit option sets: the reason "always" (over HTTP,
    # or `runs approve --reason always`) used to approve the rule for the rest of the run.
    run = store.create_run(prompt="p", model="m")
    for n in range(2):
        arguments = {"path": f"{n}.md", "content": "x"}
        store.request_approval(
            ApprovalRow(
                run_id=run.id,
                call_id=f"call_{n}",
                agent_id="sub1",
                tool="write_file",
                arguments=arguments,
                rule="Write",
                requested_at=utc_now(),
            )
        )
    worded = await decide_call(store, None, run.id, "call_0", True, "always", False, None)
    meant = await decide_call(store, None, run.id, "call_1", True, "", True, None)
    assert (worded.reason, worded.always) == ("always", False)
    assert (meant.reason, meant.always) == ("always", True)
    with pytest.raises(UserError, match="only an approval can be given always"):
        store.decide_approval(run.id, "call_9", "deny", always=True)
