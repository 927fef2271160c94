"""A live run's listing says how many of its subagents are at work now (`running_subagents`): the
ended ones are counted from their stored records, the running ones only from the run's own
recorder, which stores their number with its usage as it goes (on each store)."""

from __future__ import annotations

import asyncio

from delegate import Event, Store, Usage
from delegate.run._recorder import Recorder


def _event(run_id: str, type: str, agent_id: str) -> Event:
    return Event(type=type, run_id=run_id, agent_id=agent_id, data={})  # type: ignore[arg-type]


def test_a_live_runs_listing_counts_the_subagents_at_work_and_a_finished_run_none(store: Store) -> None:
    async def record() -> tuple[list[int], int]:
        recorder = Recorder(store, [])
        run = store.create_run(prompt="p", model="m", owner=recorder.owner)
        recorder.start(run.id)
        seen: list[int] = []
        steps = [
            [("subagent.started", "sub1"), ("subagent.started", "sub2"), ("subagent.started", "sub3")],
            [("subagent.completed", "sub1")],
            [("subagent.message", "sub1"), ("subagent.completed", "sub2")],  # a follow-up sets sub1 going again
        ]
        for events in steps:
            for type, agent_id in events:
                recorder.emit(_event(run.id, type, agent_id))
            await asyncio.wait_for(recorder.written(), 10)
            [listed] = store.listing()
            seen.append(listed.running_subagents)
        for agent_id in ("sub1", "sub3"):
            recorder.emit(_event(run.id, "subagent.completed", agent_id))
        await recorder.finish("completed", "done", Usage(), None)
        [ended] = store.listing()
        return seen, ended.running_subagents

    seen, after = asyncio.run(record())
    assert seen == [3, 2, 2]
    assert after == 0


def test_a_run_whose_process_died_lists_no_subagent_at_work(store: Store) -> None:
    async def record() -> str:
        recorder = Recorder(store, [])
        run = store.create_run(prompt="p", model="m", owner=recorder.owner)
        recorder.start(run.id)
        recorder.emit(_event(run.id, "subagent.started", "sub1"))
        await asyncio.wait_for(recorder.written(), 10)
        await recorder.release(Usage())  # left as a killed process leaves it: `interrupted`
        return run.id

    run_id = asyncio.run(record())
    [listed] = store.listing()
    assert (listed.id, listed.status, listed.running_subagents) == (run_id, "interrupted", 0)
    assert listed.to_dict()["running_subagents"] == 0
