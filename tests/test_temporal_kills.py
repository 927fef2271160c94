"""Kill tests on Temporal: worker processes SIGKILLed mid-batch (and restarted); every item is
run to completion and stored once, and the caps hold, as read from the items' start and end lines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from delegate import Store
from delegate.batch import Batches
from delegate.engine import EngineSettings

from .batch_support import USER, items
from .temporal_support import temporal_fixture  # noqa: F401

SCRIPT = Path(__file__).with_name("temporal_worker_process.py")
ROOT = Path(__file__).resolve().parent.parent


def start(engine: EngineSettings, store_url: str, log: Path, delay: float) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(engine), store_url, str(log), str(delay), "20"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


def most_at_once(log: Path, killed: dict[int, float]) -> int:
    """The most items running at once by the log: an item of a killed process ran until its kill."""
    events: list[tuple[float, int]] = []
    open_: dict[tuple[int, str], float] = {}
    for line in log.read_text().splitlines():
        what, pid, key, _attempt, at = line.split()
        if what == "start":
            open_[(int(pid), key)] = float(at)
            events.append((float(at), 1))
        else:
            open_.pop((int(pid), key), None)
            events.append((float(at), -1))
    events.extend((killed[pid], -1) for pid, _ in open_ if pid in killed)
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    return peak


def test_a_2000_item_batch_over_three_workers_one_killed_and_restarted_runs_every_item_once(
    tmp_path: Path, store_url: str, temporal: EngineSettings
) -> None:
    batches = Batches(Store.open(store_url), engine="temporal")
    log = tmp_path / "items.log"
    sub = batches.submit(
        USER, subagent_type="general-purpose", items=items(2000), max_running_items=30, max_live_items=40
    )
    workers = [start(temporal, store_url, log, 0.02) for _ in range(3)]
    killed: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 600
        while batches.get(USER, sub.batch.id).counts["succeeded"] < 600 and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        killed[victim.pid] = time.monotonic()
        victim.wait(timeout=30)
        killed_at = batches.get(USER, sub.batch.id).counts["succeeded"]
        workers[0] = start(temporal, store_url, log, 0.02)
        while not batches.get(USER, sub.batch.id).done and time.monotonic() < deadline:
            time.sleep(0.1)
        batch = batches.get(USER, sub.batch.id)
        rows = list(batches.export_rows(USER, sub.batch.id))
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
        batches.store.close()
    assert 600 <= killed_at < 2000
    assert batch.status == "completed", batch.counts
    assert len(rows) == 2000 and len({r["key"] for r in rows}) == 2000
    assert all(r["status"] == "succeeded" and r["attempts"] == 1 for r in rows)
    ends = [line for line in log.read_text().splitlines() if line.startswith("end ")]
    ended = [line.split()[2] for line in ends]
    assert len(ended) == len(set(ended)) == 2000  # each item ran to its end once (a kill ends none)
    assert all(r["usage"]["requests"] == 1 for r in rows)  # and only that run is counted
    assert most_at_once(log, killed) <= 30
