"""A worker cut off from Temporal while it still reaches the store: Temporal gives its item to
another worker after the heartbeat timeout, and the cut-off worker stops its run of the item
instead of running it to the end beside the new one (the store's fence); one result is stored,
its usage counted once."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from delegate import Store
from delegate.batch import Batches
from delegate.engine import EngineSettings

from .batch_support import USER, Runner, items
from .temporal_support import Cable, batch_done, temporal_fixture, temporal_worker, waits_for  # noqa: F401


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)  # the store of several machines
async def test_a_worker_cut_off_from_temporal_stops_the_item_another_worker_took_over(
    store_url: str, temporal: EngineSettings
) -> None:
    settings = dataclasses.replace(temporal, heartbeat_timeout=2.0)
    batches = Batches(Store.open(store_url), engine="temporal")
    taken_over = asyncio.Event()
    cut_off = Runner(delay=0.0, hold=taken_over)  # goes on until the other worker has started the item
    other = Runner(delay=0.0, watch=taken_over.set)
    async with Cable(settings.address) as cable:
        via_cable = dataclasses.replace(settings, address=cable.address)
        async with temporal_worker(via_cable, batches, cut_off):
            sub = batches.submit(USER, subagent_type="general-purpose", items=items(1))
            await waits_for(lambda: cut_off.running == 1, timeout=30)
            async with temporal_worker(settings, batches, other):
                cable.sever()  # its heartbeats no longer reach Temporal; the store still answers
                batch = await batch_done(batches, USER, sub.batch.id, timeout=30)
                await waits_for(lambda: cut_off.running == 0, timeout=10)
            cable.mend()  # so the cut-off worker can say goodbye to the server
    assert batch.status == "completed" and batch.counts["succeeded"] == 1
    assert cut_off.cancelled == ["item-0"]  # stopped, not run to its end beside the other
    assert [c.key for c in other.calls] == ["item-0"] and not other.cancelled
    row = next(iter(batches.export_rows(USER, batch.id)))
    assert row["summary"] == "done item-0 #1" and row["attempts"] == 1
    assert row["usage"]["requests"] == 1  # the one run that ended is the one counted
