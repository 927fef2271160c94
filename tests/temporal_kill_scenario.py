"""A batch over worker processes on Temporal, some SIGKILLed mid-item and restarted: for the kill
test (a few hundred items) and `bench/bench_temporal_kills.py` (2,000).

Each worker is `temporal_worker_process.py`, whose runner writes a line when an item starts and
one when it ends (process id, key, attempt, a monotonic time), so what ran where, how often, and
how many at once is read from the log, not from the store under test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delegate import Store
from delegate.batch import Batch, Batches
from delegate.engine import EngineSettings

SCRIPT = Path(__file__).with_name("temporal_worker_process.py")
ROOT = Path(__file__).resolve().parent.parent
USER = "alice"


def spawn_worker(engine: EngineSettings, store_url: str, log: Path, delay: float) -> subprocess.Popen[str]:
    """A worker process serving the engine's queue (`ready` waits until it serves)."""
    env = os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    command = [sys.executable, str(SCRIPT), str(engine), store_url, str(log), str(delay), "20"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)


def ready(process: subprocess.Popen[str]) -> None:
    """Wait until the worker says it serves (it prints `ready`), or fail."""
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != "ready":
        process.kill()
        raise RuntimeError(f"the worker process did not start (it said {line!r}, exit {process.wait()})")


@dataclass(kw_only=True)
class KillOutcome:
    """What a batch with killed workers ended with, and what its workers' log says."""

    batch: Batch
    rows: list[dict[str, Any]]
    log: Path
    killed: dict[int, float] = field(default_factory=lambda: dict[int, float]())
    """Process id of each killed worker, and when it was killed (monotonic)."""
    killed_at: list[int] = field(default_factory=lambda: list[int]())
    """How many items had succeeded at each kill."""
    seconds: float = 0.0
    phases: list[tuple[str, float]] = field(default_factory=lambda: list[tuple[str, float]]())
    """When the workers were ready and each kill came, in seconds from the submit."""

    def ended(self) -> list[str]:
        """The key of every item run to its end, once for each time it was."""
        return [line.split()[2] for line in self.log.read_text().splitlines() if line.startswith("end ")]

    def ends_not_stored(self) -> list[tuple[int, str, float]]:
        """`(process id, key, when)` of each run to its end whose result is not its item's stored
        one (the stored summary names the process that produced it)."""
        stored = {row["key"]: int(row["summary"].split()[2]) for row in self.rows if row["summary"]}
        extra: list[tuple[int, str, float]] = []
        for line in self.log.read_text().splitlines():
            what, pid, key, _attempt, at = line.split()
            if what == "end" and stored.get(key) != int(pid):
                extra.append((int(pid), key, float(at)))
        return extra

    def ran_twice_alive(self) -> list[tuple[int, str, float]]:
        """The runs to their end that did not store their result though their process lived on:
        a second run to its end of an item another worker held. (A run that ended just before its
        process was SIGKILLed, before the result was committed, is lost with the process: its item
        runs again, and that is not one of these.)"""
        return [(pid, key, at) for pid, key, at in self.ends_not_stored() if at > self.killed.get(pid, float("-inf"))]

    def most_at_once(self) -> int:
        """The most items running at once by the log: an item of a killed process ran until its kill."""
        events: list[tuple[float, int]] = []
        open_: dict[tuple[int, str], float] = {}
        for line in self.log.read_text().splitlines():
            what, pid, key, _attempt, at = line.split()
            if what == "start":
                open_[(int(pid), key)] = float(at)
                events.append((float(at), 1))
            else:
                open_.pop((int(pid), key), None)
                events.append((float(at), -1))
        events.extend((self.killed[pid], -1) for pid, _ in open_ if pid in self.killed)
        running = peak = 0
        for _, step in sorted(events):
            running += step
            peak = max(peak, running)
        return peak


def run_with_kills(
    engine: EngineSettings,
    store_url: str,
    folder: Path,
    *,
    items: int,
    kills: int,
    workers: int = 3,
    delay: float = 0.02,
    max_running: int = 30,
    timeout: float = 600.0,
    kill_server: Callable[[], None] | None = None,
) -> KillOutcome:
    """Submit `items` items, serve them with `workers` processes, SIGKILL one `kills` times (each
    at an even share of the batch, a different process each time, restarted at once), and wait
    for the batch to end (or `timeout`). `kill_server`, when given, is called at one more share
    (it SIGKILLs the Temporal server and starts it again on the same files)."""
    batches = Batches(Store.open(store_url), engine="temporal")
    log = folder / "items.log"
    rows = [{"key": f"item-{i}", "prompt": f"prompt {i}"} for i in range(items)]
    started = time.monotonic()
    sub = batches.submit(
        USER, subagent_type="general-purpose", items=rows, max_running_items=max_running, max_live_items=max_running
    )
    outcome = KillOutcome(batch=sub.batch, rows=[], log=log)
    processes = [spawn_worker(engine, store_url, log, delay) for _ in range(workers)]
    for process in processes:
        ready(process)
    outcome.phases.append(("ready", time.monotonic() - started))
    deadline = started + timeout
    try:
        shares = kills + 1 + (kill_server is not None)
        for kill in range(shares - 1):
            target = (kill + 1) * items // shares
            while batches.get(USER, sub.batch.id).counts["succeeded"] < target and time.monotonic() < deadline:
                time.sleep(0.02)
            if kill == kills and kill_server is not None:
                kill_server()
                outcome.killed_at.append(batches.get(USER, sub.batch.id).counts["succeeded"])
                outcome.phases.append(("server killed and restarted", time.monotonic() - started))
                continue
            victim = processes[kill % workers]
            victim.send_signal(signal.SIGKILL)
            outcome.killed[victim.pid] = time.monotonic()
            victim.wait(timeout=30)
            if victim.stdout is not None:
                victim.stdout.close()
            outcome.killed_at.append(batches.get(USER, sub.batch.id).counts["succeeded"])
            processes[kill % workers] = spawn_worker(engine, store_url, log, delay)
            outcome.phases.append((f"kill {kill + 1}", time.monotonic() - started))
        while not batches.get(USER, sub.batch.id).done and time.monotonic() < deadline:
            time.sleep(0.05)
        outcome.seconds = time.monotonic() - started
        outcome.batch = batches.get(USER, sub.batch.id)
        outcome.rows = list(batches.export_rows(USER, sub.batch.id))
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
            if process.stdout is not None:
                process.stdout.close()
        batches.store.close()
    return outcome
