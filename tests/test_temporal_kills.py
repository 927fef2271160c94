"""Kill tests on Temporal: worker processes SIGKILLed mid-batch (and restarted); every item is
run to completion and stored once, and the caps hold, as read from the items' start and end lines.
The same scenario at 2,000 items (and a kill of the Temporal server) is `bench/bench_temporal_kills.py`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from delegate.engine import EngineSettings

from .temporal_kill_scenario import run_with_kills
from .temporal_support import temporal_fixture  # noqa: F401

ITEMS = 60


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_batch_over_two_workers_killed_twice_stores_each_item_once_and_no_live_worker_runs_one_twice(
    tmp_path: Path, store_url: str, temporal: EngineSettings
) -> None:
    engine = dataclasses.replace(temporal, heartbeat_timeout=3.0)  # a killed worker's items move on after 3 s
    outcome = run_with_kills(
        engine, store_url, tmp_path, items=ITEMS, kills=2, workers=2, delay=0.1, max_running=15, timeout=90
    )
    assert len(outcome.killed_at) == 2 and all(0 < done < ITEMS for done in outcome.killed_at)
    assert outcome.batch.status == "completed", outcome.batch.counts
    rows = outcome.rows
    assert len(rows) == ITEMS and len({r["key"] for r in rows}) == ITEMS
    assert all(r["status"] == "succeeded" and r["attempts"] == 1 for r in rows)
    assert set(outcome.ended()) == {r["key"] for r in rows}
    # No item ran to its end twice, but for one whose first run ended as its worker was killed,
    # before it stored the result (that run's result and usage died with the process).
    assert outcome.ran_twice_alive() == []
    assert all(r["usage"]["requests"] == 1 for r in rows)  # and only that run is counted
    assert outcome.most_at_once() <= 15
