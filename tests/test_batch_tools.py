"""The lead's tools: batch_task answers at once and briefly, batch_status gives counts, cancel_batch cancels."""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate import Event, ToolContext, ToolError, Workspace
from delegate.batch import Batches, batch_tools

from .batch_support import USER, Runner, batches_fixture, count_rows, finished, items, worker  # noqa: F401


def context(tmp_path: Path, events: list[Event], *, user: str = USER, call: str = "call-1") -> ToolContext:
    ctx = ToolContext(run_id="run-1", agent_id="lead", workspace=Workspace.open(tmp_path), emit=events.append)
    ctx.user_id = user
    return ctx.for_call(call)


async def test_batch_task_answers_with_the_id_and_count_and_the_batch_runs(batches: Batches, tmp_path: Path) -> None:
    task, status, _ = batch_tools(batches, known_types=lambda: ["general-purpose"])
    events: list[Event] = []
    arguments = {"title": "READMEs", "subagent_type": "general-purpose", "items": items(4), "max_running_items": 2}
    answer = await task.run(context(tmp_path, events), arguments)
    batch_id = answer.data["id"]
    assert answer.content.startswith(f"Batch {batch_id} accepted with 4 items. It is running independently")
    assert "survives restarts" in answer.content and "do not start task calls" in answer.content
    assert [e.type for e in events] == ["batch.submitted"]
    assert events[0].tool_call_id == "call-1" and events[0].data["items"] == 4
    stored = batches.get(USER, batch_id)
    assert (stored.run_id, stored.tool_call_id, stored.max_running_items) == ("run-1", "call-1", 2)

    async with worker(batches, Runner()) as w:
        await finished(w, batch_id)
    report = await status.run(context(tmp_path, events, call="call-2"), {"batch_id": batch_id})
    assert report.content == f"Batch {batch_id} (READMEs) is completed: 4 succeeded of 4."
    assert "done item" not in report.content  # results never reach the lead's context


async def test_resubmitting_the_same_tool_call_returns_the_same_batch(batches: Batches, tmp_path: Path) -> None:
    task, _, _ = batch_tools(batches)
    arguments = {"title": "t", "subagent_type": "x", "items": items(2)}
    first = await task.run(context(tmp_path, []), arguments)
    again = await task.run(context(tmp_path, []), arguments)
    assert again.data["id"] == first.data["id"]
    assert again.content.startswith(f"Batch {first.data['id']} was already accepted for this tool call")
    assert count_rows(batches.store) == (1, 2)


async def test_invalid_items_are_a_tool_error_and_store_nothing(batches: Batches, tmp_path: Path) -> None:
    task, _, _ = batch_tools(batches, known_types=["general-purpose"])
    bad = [{"key": "a", "prompt": "p"}, {"key": "a", "prompt": ""}]
    with pytest.raises(ToolError, match="duplicate key 'a'") as caught:
        await task.run(context(tmp_path, []), {"title": "t", "subagent_type": "general-purpose", "items": bad})
    assert "empty prompt" in str(caught.value)
    with pytest.raises(ToolError, match="unknown subagent_type 'nope'; available: general-purpose"):
        await task.run(context(tmp_path, []), {"title": "t", "subagent_type": "nope", "items": items(1)})
    with pytest.raises(ToolError, match="invalid arguments for batch_task"):
        await task.run(context(tmp_path, []), {"title": "t", "subagent_type": "x", "items": [{"key": "a"}]})
    assert count_rows(batches.store) == (0, 0)


async def test_status_and_cancel_of_another_users_batch_are_not_found(batches: Batches, tmp_path: Path) -> None:
    task, status, cancel = batch_tools(batches)
    submitted = await task.run(context(tmp_path, []), {"title": "t", "subagent_type": "x", "items": items(2)})
    batch_id = submitted.data["id"]
    for tool in (status, cancel):
        with pytest.raises(ToolError, match=f"no batch '{batch_id}'"):
            await tool.run(context(tmp_path, [], user="bob"), {"batch_id": batch_id})
    answer = await cancel.run(context(tmp_path, []), {"batch_id": batch_id})
    assert answer.content == f"Cancelled. Batch {batch_id} (t) is cancelled: 2 cancelled of 2."


def test_the_tools_describe_their_caps_and_required_fields(batches: Batches) -> None:
    task, status, cancel = batch_tools(batches)
    assert [t.name for t in (task, status, cancel)] == ["batch_task", "batch_status", "cancel_batch"]
    schema = task.parameters
    assert schema["required"] == ["title", "subagent_type", "items"]
    assert "1-1000" in schema["properties"]["max_running_items"]["description"]
    item = schema["$defs"]["BatchItemArg"]
    assert item["required"] == ["key", "prompt"] and item["additionalProperties"] is False


def test_a_repeated_model_call_id_submits_one_batch_for_the_same_call_and_another_for_a_new_one(
    tmp_path: Path,
) -> None:
    # The loop gives a repeated tool call id a name of its own (`call_7_2`); the batch's idempotency
    # key followed the new name, so the model repeating its batch_task under the same id submitted
    # the batch twice (it returned the first one before the renaming).
    from dataclasses import replace

    from delegate import Lead, Runtime, Store
    from delegate._messages import ToolCallPart
    from delegate.models import ModelRequest, ModelResponse
    from delegate.testing import FunctionModel, call, reply

    arguments = {"title": "t", "subagent_type": "general-purpose", "items": items(2)}
    other = {"title": "u", "subagent_type": "general-purpose", "items": items(3)}
    answers = [arguments, arguments, other]

    def same_id(response: ModelResponse) -> ModelResponse:
        (part,) = response.parts
        assert isinstance(part, ToolCallPart)
        return replace(response, parts=[replace(part, id="call_7")])

    def model(request: ModelRequest) -> ModelResponse:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        return same_id(call("batch_task", **answers[turn])) if turn < len(answers) else reply("submitted")

    with Store.for_workspace(tmp_path) as store:
        rt = Runtime(model=FunctionModel(model), workspace=tmp_path, lead=Lead(tools=["batch_task"]), store=store)
        result = rt.run_sync("run a batch of READMEs")
        submitted = sorted((b.title, b.total) for b in Batches(store).list_batches("default"))
    results = [p.content for m in result.messages for p in m.tool_results]
    assert submitted == [("t", 2), ("u", 3)]  # the repeated call once, the new call under the same id too
    assert "was already accepted for this tool call" in results[1]
    assert "accepted with 3 items" in results[2]
