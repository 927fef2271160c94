"""What a run keeps in the store as it goes: text that is always UTF-8, bounded events, a final
answer stored once, a lease that says whether its process lives, cancellation through the store,
and the server's view of a run whose process died."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import (
    Event,
    ModelError,
    RunCancelled,
    RunError,
    RunLimits,
    Runtime,
    RuntimeSettings,
    Store,
    TaskOutput,
    Usage,
)
from delegate._config import DEFAULT_RUN_TIMEOUT
from delegate.loop import EVENT_VALUE_LIMIT
from delegate.models import ModelRequest, ModelResponse
from delegate.run import stored_events
from delegate.run._recorder import Recorder
from delegate.server import ServerSettings, create_app
from delegate.server._state import app_state
from delegate.testing import FunctionModel, ScriptedModel, call, reply
from tests.durable_support import only_run, wait_for
from tests.loopback_server import LiveServer


def test_text_that_is_not_utf8_is_stored_and_shown_with_escapes(tmp_path: Path) -> None:
    model = ScriptedModel([call("write_file", path="caf\udce9.md", content="x"), reply("done \ud800 and caf\udce9")])
    rt = Runtime(model=model, workspace=tmp_path)
    result = rt.run_sync("write it")
    assert result.status == "completed"
    store = Store.for_workspace(tmp_path)
    run = store.get_run(result.run_id)
    assert run is not None and run.status == "completed"
    assert run.final == "done \\ud800 and caf\\xe9"  # an undecodable byte as \xNN, a lone surrogate as \uNNNN
    started = next(e for e in store.events(result.run_id) if e.type == "tool.started")
    assert started.data["arguments"]["path"] == "caf\\xe9.md"
    # the argument was made valid UTF-8 where it came in, so the tool was given the escape too
    assert (tmp_path / "caf\\xe9.md").read_text() == "x"
    store.close()


@pytest.mark.parametrize("heard", [False, True])
def test_an_event_only_the_store_hears_is_stored_with_the_escapes_a_sink_gets(store: Store, heard: bool) -> None:
    """With no sink the recorder queues the event as made (no `Event.safe` copy, its `detail`
    let go): the writer escapes its text as it writes, the same text stored either way."""
    got: list[Event] = []
    event = Event(
        type="workspace.merged", run_id="", agent_id="sub\udce9", tool_call_id="call_\ud800",
        data={"path": "caf\udce9.md", "why": ["\ud800"]}, detail=object(),
    )  # fmt: skip

    async def record() -> str:
        recorder = Recorder(store, [got.append] if heard else [])
        run = store.create_run(prompt="p", model="m", owner=recorder.owner)
        recorder.start(run.id)
        event.run_id = run.id
        recorder.emit(event)
        await recorder.finish("completed", "done", Usage(), None)
        return run.id

    run_id = asyncio.run(record())
    [stored] = store.events(run_id)
    assert (event.detail is None) == (not heard)  # a sink may read it; the store never does
    safe = event.safe()
    assert (stored.agent_id, stored.tool_call_id, stored.data) == (safe.agent_id, safe.tool_call_id, safe.data)
    assert stored.data == {"path": "caf\\xe9.md", "why": ["\\ud800"]}
    assert [e.agent_id for e in got] == (["sub\\xe9"] if heard else [])


def test_waiting_for_the_writer_ends_whether_it_wrote_failed_a_check_or_has_stopped(store: Store) -> None:
    """`Recorder.written` (what a follow-up waits on) returns once what came before it is stored;
    a heartbeat's check that fails does not end the writer; once the writer has ended nothing
    waits on it."""
    checks = {"failed": 0}

    def failing_check() -> None:
        checks["failed"] += 1
        raise RuntimeError("database is locked")

    async def record() -> tuple[str, int]:
        recorder = Recorder(store, [], heartbeat=0.01)
        recorder.on_beat(failing_check)
        run = store.create_run(prompt="p", model="m", owner=recorder.owner)
        recorder.start(run.id)

        async def three_failed() -> None:  # the writer outlives its failing checks
            while checks["failed"] < 3:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(three_failed(), 10)
        recorder.emit(Event(type="warning", run_id=run.id, agent_id="lead", data={"n": 1}))
        await asyncio.wait_for(recorder.written(), 10)
        stored = len(store.events(run.id))  # written before `written` returned
        await recorder.finish("completed", "done", Usage(), None)
        await asyncio.wait_for(recorder.written(), 10)  # the writer has ended: no wait
        return run.id, stored

    _, stored = asyncio.run(record())
    assert stored == 1


def test_runs_writing_at_once_leave_the_gil_switch_interval_as_they_found_it(tmp_path: Path) -> None:
    """The recorders shorten it while they write (`QUICK_SWITCH`); the process's own comes back."""
    ours = 0.0123
    before = sys.getswitchinterval()
    sys.setswitchinterval(ours)
    try:

        async def three_runs() -> list[str]:
            rt = Runtime(model=ScriptedModel([reply("one"), reply("two"), reply("three")]), workspace=tmp_path)
            done = await asyncio.gather(*(rt.run(f"say {n}") for n in range(3)))
            await rt.aclose()
            return [r.status for r in done]

        assert asyncio.run(three_runs()) == ["completed"] * 3
        assert sys.getswitchinterval() == pytest.approx(ours)
    finally:
        sys.setswitchinterval(before)


def test_a_huge_tool_argument_is_kept_in_events_cut_with_its_full_size(tmp_path: Path) -> None:
    content = "y" * (20 * 1024 * 1024)
    rt = Runtime(
        model=ScriptedModel([call("write_file", path="big.txt", content=content), reply("ok")]), workspace=tmp_path
    )
    result = rt.run_sync("write a big file")
    assert (tmp_path / "big.txt").stat().st_size == len(content)
    with Store.for_workspace(tmp_path) as store:
        started = next(e for e in store.events(result.run_id) if e.type == "tool.started")
    arguments = started.data["arguments"]
    assert len(arguments["content"]) == EVENT_VALUE_LIMIT
    assert arguments["content_size"] == len(content) and arguments["truncated"] is True


def test_a_final_answer_is_stored_once_in_full(tmp_path: Path) -> None:
    answer = "z" * (EVENT_VALUE_LIMIT * 4)
    result = Runtime(model=ScriptedModel([reply(answer)]), workspace=tmp_path).run_sync("answer at length")
    with Store.for_workspace(tmp_path) as store:
        run = store.get_run(result.run_id)
        completed = [e for e in store.events(result.run_id) if e.type == "run.completed"]
    assert run is not None and run.final == answer
    assert [len(e.data["final"]) for e in completed] == [EVENT_VALUE_LIMIT]
    assert completed[0].data["final_size"] == len(answer)


def test_runs_have_a_default_timeout_and_end_timed_out(tmp_path: Path) -> None:
    assert Runtime(model=ScriptedModel([]), workspace=tmp_path).limits.timeout == DEFAULT_RUN_TIMEOUT
    never = asyncio.Event()

    async def stuck(request: ModelRequest) -> ModelResponse:
        await never.wait()
        raise AssertionError("unreachable")

    result = Runtime(model=FunctionModel(stuck), workspace=tmp_path, limits=RunLimits(timeout=0.2)).run_sync("wait")
    assert (result.status, result.stop_reason) == ("timed_out", "timeout")
    with Store.for_workspace(tmp_path) as store:
        run = store.get_run(result.run_id)
    assert run is not None and run.status == "timed_out"


def test_a_run_is_cancelled_from_another_store_handle_at_its_next_heartbeat(tmp_path: Path) -> None:
    asked = threading.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    rt = Runtime(model=FunctionModel(slow), workspace=tmp_path)
    other = Store.for_workspace(tmp_path)  # what `delegate runs cancel` opens in its own process

    def cancel_when_asked() -> None:
        asked.wait(30)
        run = other.list_runs(None)[0]
        assert run.status == "running"
        other.request_cancel(run.id)

    canceller = threading.Thread(target=cancel_when_asked)
    canceller.start()
    result = rt.run_sync("wait for ever")
    canceller.join()
    assert result.status == "cancelled"
    run = other.get_run(result.run_id)
    assert run is not None and run.status == "cancelled"
    other.close()


def test_raise_for_status_gives_back_a_completed_result(tmp_path: Path) -> None:
    result = Runtime(model=ScriptedModel([reply("done")]), workspace=tmp_path, store=False).run_sync("go")
    assert result.raise_for_status() is result
    assert result.raise_for_status().final == "done"


def test_raise_for_status_raises_run_error_naming_the_run_that_failed(tmp_path: Path) -> None:
    async def broken(request: ModelRequest) -> ModelResponse:
        raise ModelError("the provider refused the key")

    result = Runtime(model=FunctionModel(broken), workspace=tmp_path).run_sync("go")
    with pytest.raises(RunError, match="the provider refused the key") as caught:
        result.raise_for_status()
    assert not isinstance(caught.value, RunCancelled)
    assert (caught.value.run_id, caught.value.status) == (result.run_id, "error")
    with Store.for_workspace(tmp_path) as store:  # the id names the run `delegate runs show` finds
        run = store.get_run(caught.value.run_id)
    assert run is not None and run.status == "error"


def test_raise_for_status_raises_run_cancelled_for_a_cancelled_run(tmp_path: Path) -> None:
    async def cancel_then_wait(request: ModelRequest) -> ModelResponse:
        run = rt.store.list_runs(None)[0]
        rt.store.request_cancel(run.id)  # what `delegate runs cancel` does; seen at the next heartbeat
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    rt = Runtime(model=FunctionModel(cancel_then_wait), workspace=tmp_path)
    result = rt.run_sync("wait")
    with pytest.raises(RunCancelled, match=f"run {result.run_id} ended cancelled") as caught:
        result.raise_for_status()
    assert isinstance(caught.value, RunError)
    assert (caught.value.run_id, caught.value.status) == (result.run_id, "cancelled")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_whose_process_died_reads_interrupted_and_its_followers_get_a_terminal_event(
    store: Store, tmp_path: Path
) -> None:
    from delegate._lease import host_identity

    _, token = store.add_user("ada")
    user = store.user_for_token(token)
    run = store.create_run(prompt="p", model="openai:m", user_id=user, owner=f"{host_identity()}|{_dead_pid()}|x")
    assert store.get_run(run.id).status == "interrupted"  # type: ignore[union-attr]
    config = ServerSettings(
        runtime=RuntimeSettings(workspace=tmp_path), model=lambda name: ScriptedModel([]), run_batches=False
    )
    app = create_app(config, store=store)
    app_state(app).takeover.watch = _no_takeover  # this server leaves it interrupted, for the test to look at
    with (
        LiveServer(app) as server,
        httpx2.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60) as api,
    ):
        assert api.get(f"/runs/{run.id}").json()["status"] == "interrupted"
        with api.stream("GET", f"/runs/{run.id}/events") as response:
            events = list(httpx2.EventSource(response))
        assert [(e.event, e.json()["data"]["status"]) for e in events] == [("run.completed", "interrupted")]
        cancelled = api.post(f"/runs/{run.id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        again = api.post(f"/runs/{run.id}/resume")
        assert again.status_code == 409


async def _no_takeover() -> None:
    await asyncio.Event().wait()


def test_a_result_the_database_refuses_fails_its_own_item_and_the_others_are_stored(
    store_url: str, tmp_path: Path
) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("PostgreSQL refuses NUL characters in text; SQLite stores them")
    from delegate.batch import Batches, BatchWorker

    def answer(request: ModelRequest) -> ModelResponse:
        prompt = request.messages[-1].text
        summary = "bad \x00 summary" if "nul" in prompt else f"fine: {prompt[:20]}"
        return call("complete", summary=summary)

    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, store=False)

    class Poisoning:
        """The runtime, but an item whose prompt says `poison` crashes with a NUL in its error."""

        async def run_task(self, **arguments: Any) -> TaskOutput:
            if "poison" in arguments["prompt"]:
                raise RuntimeError("bad \x00 error")
            return await rt.run_task(**arguments)

    with Store.open(store_url) as store:
        batches = Batches(store)
        prompts = {"k3": "poison", "k5": "nul"}
        items = [{"key": f"k{i}", "prompt": prompts.get(f"k{i}", f"item {i}")} for i in range(8)]
        batch = batches.submit("default", subagent_type="explore", title="t", items=items).batch

        async def go() -> None:
            async with BatchWorker(batches, Poisoning(), retry_delay=0.01) as worker:
                await worker.wait("default", batch.id)

        asyncio.run(go())
        done = batches.get("default", batch.id)
        assert done.counts["succeeded"] == 7 and done.counts["failed"] == 1
        poisoned = batches.item("default", batch.id, "k3")
        assert poisoned.status == "failed" and "could not be stored" in (poisoned.error or "")
        # A record is stored as JSON, where a NUL is an escape: it is kept whole.
        assert batches.item("default", batch.id, "k5").summary == "bad \x00 summary"


def test_of_two_processes_resuming_one_interrupted_run_exactly_one_wins(store: Store) -> None:
    from delegate._errors import UserError
    from delegate._lease import host_identity

    run = store.create_run(prompt="p", model="m", owner=f"{host_identity()}|{_dead_pid()}|x")
    assert store.claim_run(run.id, "elsewhere|1|a").status == "running"
    with pytest.raises(UserError, match="still running"):
        store.claim_run(run.id, "elsewhere|2|b")
    stored = store.get_run(run.id)
    assert stored is not None and stored.owner == "elsewhere|1|a"


async def test_a_follower_is_given_run_completed_only_once_the_runs_end_is_stored(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run.completed` is stored a moment before how the run ended: a follower reading the store
    (`delegate runs events --follow`, the server for a run of another process) waits for both,
    so the run it reads once it stopped is the finished one."""
    may_finish = threading.Event()
    finish_run = store.finish_run

    def slow_finish(*args: Any, **kwargs: Any) -> Any:
        assert may_finish.wait(60)
        return finish_run(*args, **kwargs)

    monkeypatch.setattr(store, "finish_run", slow_finish)
    runtime = Runtime(model=FunctionModel(lambda r: reply("done")), workspace=tmp_path, store=store)
    going = asyncio.create_task(runtime.run("answer"))
    try:
        run_id = await asyncio.to_thread(
            wait_for, lambda: (r := only_run(store)) is not None and r.event_count > 0 and r.id
        )
        await asyncio.to_thread(
            wait_for, lambda: store.events(run_id)[-1].type == "run.completed", what="run.completed stored"
        )
        follow = stored_events(store, run_id, 0)
        early, done = await follow()
        assert not done and "run.completed" not in [e.type for _, e in early]
        assert (await follow()) == ([], False)  # held back while the run reads running
    finally:
        may_finish.set()
    await going
    last, done = await follow()
    assert done and [e.type for _, e in last] == ["run.completed"]
    assert [n for n, _ in [*early, *last]] == list(range(1, len(early) + 2))
    ended = store.get_run(run_id)
    assert ended is not None and (ended.status, ended.final) == ("completed", "done")
