"""Kill tests on Temporal: worker processes SIGKILLed mid-batch (and restarted); every item is
run to completion and stored once, and the caps hold, as read from the items' start and end lines.
The same scenario at 2,000 items is `bench/bench_temporal_kills.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate.engine import EngineSettings

from .temporal_kill_scenario import run_with_kills
from .temporal_support import temporal_fixture  # noqa: F401


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_batch_over_three_workers_killed_twice_runs_every_item_to_its_end_once(
    tmp_path: Path, store_url: str, temporal: EngineSettings
) -> None:
    outcome = run_with_kills(temporal, store_url, tmp_path, items=240, kills=2, timeout=120)
    assert len(outcome.killed_at) == 2 and all(0 < done < 240 for done in outcome.killed_at)
    assert outcome.batch.status == "completed", outcome.batch.counts
    rows = outcome.rows
    assert len(rows) == 240 and len({r["key"] for r in rows}) == 240
    assert all(r["status"] == "succeeded" and r["attempts"] == 1 for r in rows)
    ended = outcome.ended()
    assert len(ended) == len(set(ended)) == 240  # each item ran to its end once (a kill ends none)
    assert all(r["usage"]["requests"] == 1 for r in rows)  # and only that run is counted
    assert outcome.most_at_once() <= 30
