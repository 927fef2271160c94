"""Threads from Python: a run continues an earlier one, its lead starting from that run's
conversation (never a subagent's transcript), with the thread's uploads; a thread is a chain that
never forks, and a run that has not ended cannot be continued."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from delegate import Runtime, Store, UserError
from delegate.models import ModelRequest, ModelResponse
from delegate.run import stored_result
from delegate.testing import FunctionModel, call, is_lead, reply

TRANSCRIPT_ONLY = "scratch-7f3a.txt"
"""Text only the subagent's transcript holds (a tool result it read), never its summary."""


def _seen(request: ModelRequest) -> str:
    """Everything a request holds, as one text."""
    texts: list[str] = []
    for message in request.messages:
        for part in message.parts:
            texts += [str(getattr(part, name, "")) for name in ("text", "content", "arguments")]
    return "\n".join(texts)


def _delegating_lead(request: ModelRequest) -> ModelResponse:
    """The lead delegates once per turn and answers with what it got; the subagent reads a file
    (its transcript) and completes with a summary."""
    last = request.messages[-1]
    if is_lead(request):
        if last.role == "user":
            return call("task", subagent_type="general-purpose", description="read the notes", prompt=last.text)
        return reply(f"answer to: {request.messages[-3].text}")
    if last.role == "user":
        return call("list_uploaded_files")
    return call("complete", summary=f"read the notes; uploads: {last.tool_results[0].content[:200]}")


def _runtime(root: Path, model: FunctionModel) -> Runtime:
    return Runtime(model=model, workspace=root)


async def test_a_second_turn_sees_the_first_exchange_and_no_subagent_transcript(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        if not is_lead(request) and request.messages[-1].role == "tool":
            assert TRANSCRIPT_ONLY in request.messages[-1].tool_results[0].content  # what the subagent read
            return call("complete", summary="read the notes")
        return _delegating_lead(request)

    model = FunctionModel(answer)
    rt = _runtime(tmp_path, model)
    first = await rt.run("Summarise the notes.", uploaded_files=[{"filename": TRANSCRIPT_ONLY}])
    seen_before = len(model.requests)
    second = await rt.run("Now fix the second point.", continue_from=first.run_id)
    await rt.aclose()
    assert second.status == "completed"
    lead_request = next(r for r in model.requests[seen_before:] if is_lead(r))
    text = _seen(lead_request)
    assert "Summarise the notes." in text and "answer to: Summarise the notes." in text
    assert "read the notes" in text  # the task result the lead got
    assert TRANSCRIPT_ONLY not in text
    assert lead_request.messages[-1].text == "Now fix the second point."
    assert (second.thread_id, second.previous_run_id) == (first.run_id, first.run_id)
    assert second.to_dict()["thread_id"] == first.run_id


async def test_the_threads_uploads_reach_the_second_turns_subagents(tmp_path: Path) -> None:
    model = FunctionModel(_delegating_lead)
    rt = _runtime(tmp_path, model)
    first = await rt.run("Read my notes.", uploaded_files=[{"filename": "notes.txt", "path": "notes.txt"}])
    second = await rt.run(
        "And the plan.", continue_from=first.run_id, uploaded_files=[{"filename": "plan.md", "path": "plan.md"}]
    )
    await rt.aclose()
    summary = second.subagents[0].summary
    assert "notes.txt" in summary and "plan.md" in summary


async def test_a_thread_object_sends_turns_and_counts_usage_per_run_and_per_thread(tmp_path: Path) -> None:
    rt = Runtime(model=FunctionModel(lambda r: reply(f"turn {len(r.messages)}")), workspace=tmp_path)
    thread = rt.thread()
    first = await thread.send("One.")
    second = await thread.send("Two.")
    assert [r.run_id for r in thread.runs] == [first.run_id, second.run_id]
    assert thread.id == first.run_id and second.previous_run_id == first.run_id
    assert second.final == "turn 3"  # it saw One., its answer, and Two.
    assert thread.usage.total_tokens == first.usage.total_tokens + second.usage.total_tokens > 0
    again = rt.thread(second.run_id)
    assert [r.run_id for r in again.runs] == [first.run_id, second.run_id]
    third = await again.send("Three.")
    await rt.aclose()
    assert third.final == "turn 5" and third.thread_id == first.run_id


async def test_a_run_still_going_waiting_or_interrupted_cannot_be_continued(tmp_path: Path) -> None:
    store = Store.for_workspace(tmp_path)
    rt = Runtime(model=FunctionModel(lambda r: reply("ok")), workspace=tmp_path, store=store)
    running = store.create_run(prompt="p", model="m", workspace=str(tmp_path))
    with pytest.raises(UserError, match=f"run {running.id} is still running: wait for it to end"):
        await rt.run("next", continue_from=running.id)
    interrupted = store.create_run(prompt="p", model="m", workspace=str(tmp_path), owner="nohost|1|x")
    store.release_run(interrupted.id, "nohost|1|x")
    with pytest.raises(UserError, match=f"resume it \\(`delegate run --resume {interrupted.id}`\\)"):
        await rt.run("next", continue_from=interrupted.id)
    waiting = store.create_run(prompt="p", model="m", workspace=str(tmp_path))
    with store.write() as conn:  # a call of it waits for a person
        conn.execute(sa.text("UPDATE runs SET waiting = 1 WHERE id = :id"), {"id": waiting.id})
    with pytest.raises(UserError, match=f"run {waiting.id} is waiting for a person to approve a call: decide"):
        await rt.run("next", continue_from=waiting.id)
    with pytest.raises(UserError, match="no run 'run_nope' to continue"):
        await rt.run("next", continue_from="run_nope")
    await rt.aclose()
    store.close()


def test_two_continues_of_one_run_make_one_thread_and_the_other_is_told_who_won(store_url: str, tmp_path: Path) -> None:
    store = Store.open(store_url)
    first = store.create_run(prompt="p", model="m")
    store.finish_run(first.id, "completed", final="done")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def go() -> None:
        with Store.open(store_url) as mine:
            barrier.wait()
            try:
                outcomes.append(mine.create_run(prompt="q", model="m", previous_run_id=first.id).id)
            except UserError as exc:
                outcomes.append(str(exc))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs = store.thread_runs(first.id)
    store.close()
    assert len(runs) == 2 and runs[1].previous_run_id == first.id
    winner = runs[1].id
    assert sorted(outcomes, key=len) == [
        winner,
        f"run {first.id} was already continued by run {winner} (thread {first.id}): "
        f"continue the thread's last run, {winner}",
    ]


async def test_two_concurrent_continues_through_the_runtime_give_one_thread(tmp_path: Path) -> None:
    rt = Runtime(model=FunctionModel(lambda r: reply("ok")), workspace=tmp_path)
    first = await rt.run("One.")
    results = await asyncio.gather(
        rt.run("Two.", continue_from=first.run_id), rt.run("Deux.", continue_from=first.run_id), return_exceptions=True
    )
    store = rt.store
    assert store is not None
    runs = store.thread_runs(first.run_id)
    await rt.aclose()
    assert len(runs) == 2
    errors = [r for r in results if isinstance(r, UserError)]
    assert len(errors) == 1 and "was already continued by run" in str(errors[0])


async def test_a_run_in_another_workspace_is_continued_there(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    here = Runtime(model=FunctionModel(lambda r: reply("ok")), workspace=tmp_path / "a", store=db)
    first = await here.run("One.")
    await here.aclose()
    there = Runtime(model=FunctionModel(lambda r: reply("ok")), workspace=tmp_path / "b", store=db)
    with pytest.raises(UserError, match=r"continue it there \(--workspace .*, or Runtime\(workspace=\.\.\.\)"):
        await there.run("Two.", continue_from=first.run_id)
    await there.aclose()


async def test_a_cancelled_turn_is_continued_with_its_unfinished_call_answered(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        if is_lead(request) and request.messages[-1].text == "Start.":
            return call("task", subagent_type="general-purpose", description="wait", prompt="wait")
        if not is_lead(request):
            started.set()
            await asyncio.sleep(3600)
        return reply(f"saw {len(request.messages)} messages")

    model = FunctionModel(slow)
    rt = _runtime(tmp_path, model)
    going = asyncio.create_task(rt.run("Start."))
    await started.wait()
    going.cancel()
    with pytest.raises(asyncio.CancelledError):
        await going
    store = rt.store
    assert store is not None
    cancelled = store.list_runs()[0]
    assert cancelled.status == "cancelled"
    second = await rt.run("Go on.", continue_from=cancelled.id)
    await rt.aclose()
    assert second.final == "saw 4 messages"  # Start., the call, its result (cut short), Go on.
    result = stored_result(store, second.run_id)
    assert result is not None and result.previous_run_id == cancelled.id
