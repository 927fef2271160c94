"""Workers in processes of their own: killed with SIGKILL and restarted, or two sharing one batch.

Each worker logs when an item starts and ends (batch_worker_process.py); from those lines the tests
count how many items ran at once across processes, and which run produced each stored result.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from delegate.batch import Batches
from delegate.batch._store import ITEMS

from .batch_support import (
    USER,
    batches_fixture,  # noqa: F401  (the `batches` fixture)
    items,
    subprocess_env,
    worker_command,
)

Interval = tuple[float, float]


class Workers:
    """Starts worker processes and kills them; remembers when each one was killed."""

    def __init__(self, store_url: str, batches: Batches, log: Path, delay: float) -> None:
        self.args = (store_url, log, delay)
        self.processes: list[subprocess.Popen[str]] = []
        self.killed: dict[int, float] = {}

    def start(self, *extra: str) -> subprocess.Popen[str]:
        """A worker process; `extra`: its CONCURRENCY and FAIL (see batch_worker_process.py)."""
        command = worker_command(*self.args, *extra)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=subprocess_env())
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready", "the worker did not start"
        self.processes.append(process)
        return process

    def kill(self, process: subprocess.Popen[str]) -> None:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        self.killed[process.pid] = time.monotonic()
        assert process.stdout is not None
        process.stdout.close()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture
def workers(store_url: str, batches: Batches, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(store_url, batches, tmp_path / "runs.log", delay=0.05)
    yield started
    started.stop_all()


def read_log(log: Path, killed: dict[int, float]) -> dict[tuple[str, int, int], Interval]:
    """Every run as (key, attempt, pid) -> (start, end); a run cut by SIGKILL ends at the kill."""
    starts: dict[tuple[str, int, int], float] = {}
    runs: dict[tuple[str, int, int], Interval] = {}
    for line in log.read_text().splitlines():
        what, pid, key, attempt, moment = line.split()
        run = (key, int(attempt), int(pid))
        if what == "start":
            starts[run] = float(moment)
        else:
            runs[run] = (starts.pop(run), float(moment))
    for run, start in starts.items():
        runs[run] = (start, killed[run[2]])
    return runs


def most_at_once(intervals: Iterator[Interval] | list[Interval]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    current = peak = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


def wait_until(condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def progress(log: Path, pid: int) -> tuple[int, int]:
    """(runs ended in all, runs in flight in process `pid`) so far."""
    text = log.read_text() if log.exists() else ""
    # the workers are writing while we read: only whole lines count
    lines = [line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")]
    ends = sum(1 for line in lines if line[0] == "end")
    mine = [line[0] for line in lines if line[1] == str(pid)]
    return ends, mine.count("start") - mine.count("end") - mine.count("stop")


def test_a_worker_killed_with_sigkill_again_and_again_loses_nothing_and_stores_each_result_once(
    batches: Batches, workers: Workers
) -> None:
    log = workers.args[1]
    sub = batches.submit(USER, subagent_type="t", items=items(300), max_running_items=20, max_live_items=30)
    batch_id = sub.batch.id
    for kills in range(3):
        process = workers.start()
        wait_until(lambda n=kills, p=process.pid: progress(log, p)[0] >= 60 * (n + 1) and progress(log, p)[1] >= 5)
        workers.kill(process)
        assert batches.get(USER, batch_id).counts["running"] > 0  # its claims are still held...
    workers.start()  # ...until the next worker sees its process is gone and takes them back
    wait_until(lambda: batches.get(USER, batch_id).done)

    batch = batches.get(USER, batch_id)
    assert batch.counts == {"queued": 0, "running": 0, "succeeded": 300, "failed": 0, "cancelled": 0}
    runs = read_log(log, workers.killed)
    assert len(runs) > 300  # items cut by the kills ran again from the start
    assert most_at_once(list(runs.values())) <= 20
    for item in batches.items(USER, batch_id, limit=300):
        key, _, pid, _, attempt = (item.summary or "").split()
        assert key == item.key
        finished_run = runs[(key, int(attempt), int(pid))]
        assert finished_run[1] not in workers.killed.values()  # the stored result is of a finished run
        assert item.attempts >= int(attempt)


def test_two_workers_share_one_batch_within_its_caps(batches: Batches, workers: Workers) -> None:
    log = workers.args[1]
    first, second = workers.start(), workers.start()
    sub = batches.submit(USER, subagent_type="t", items=items(200), max_running_items=12, max_live_items=12)
    wait_until(lambda: batches.get(USER, sub.batch.id).done)
    assert batches.get(USER, sub.batch.id).counts["succeeded"] == 200
    runs = read_log(log, workers.killed)
    assert len(runs) == 200
    assert most_at_once(list(runs.values())) <= 12
    assert {pid for _, _, pid in runs} == {first.pid, second.pid}


def test_a_killed_worker_not_yet_reaped_counts_as_gone() -> None:
    from delegate.batch._engine import _process_gone  # pyright: ignore[reportPrivateUsage]

    process = subprocess.Popen(["sleep", "30"])
    assert not _process_gone(process.pid)
    process.send_signal(signal.SIGKILL)
    wait_until(lambda: Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z")
    assert _process_gone(process.pid)  # a zombie: its claims can be taken back at once
    process.wait()
    assert _process_gone(process.pid)


def test_a_kill_between_attempts_neither_loses_nor_double_counts_what_they_spent(
    batches: Batches, workers: Workers
) -> None:
    """Each item's first two attempts fail; attempt n spends 100**(n-1) input tokens, so each pair
    of digits of an item's total counts how often attempt n was counted. Workers are killed while
    attempts run and retries wait; every attempt whose failure or success was stored is counted
    once, none that stored nothing is."""
    log = workers.args[1]
    sub = batches.submit(USER, subagent_type="t", items=items(60), max_running_items=10, max_live_items=60)
    batch_id = sub.batch.id
    for kills in range(2):
        process = workers.start("500", "2")
        wait_until(lambda n=kills, p=process.pid: progress(log, p)[0] >= 50 * (n + 1) and progress(log, p)[1] >= 3)
        workers.kill(process)
    survivor = workers.start("500", "2")
    wait_until(lambda: batches.get(USER, batch_id).done)

    runs = read_log(log, workers.killed)
    assert any(end in workers.killed.values() for end in (e for _, e in runs.values()))  # attempts were cut
    with batches.store.read() as conn:
        query = sa.select(ITEMS.c.key, ITEMS.c.failures).where(ITEMS.c.batch_id == batch_id)
        failures = dict(conn.execute(query).all())
    total_tokens = total_requests = carried = 0
    for item in batches.items(USER, batch_id, limit=60):
        assert item.status == "succeeded" and item.usage is not None
        counted = {n for n in range(1, item.attempts + 1) if item.usage.input_tokens // 100 ** (n - 1) % 100}
        assert item.usage.input_tokens == sum(100 ** (n - 1) for n in counted)  # none counted twice
        assert item.usage.requests == len(counted)
        assert item.usage.cost_usd == pytest.approx(0.001 * len(counted), rel=1e-9)
        ended = {n for (key, n, _), (_, end) in runs.items() if key == item.key and end not in workers.killed.values()}
        assert counted <= ended  # only attempts that ended
        assert len(counted & {1, 2}) == failures[item.key]  # each stored failure counted, none else
        assert int((item.summary or "").split()[-1]) in counted  # and the success stored
        mine = {n for (key, n, pid) in runs if key == item.key and pid == survivor.pid}
        assert mine <= counted  # the surviving worker stored all it ran
        carried += len(counted - mine)
        total_tokens += item.usage.input_tokens
        total_requests += item.usage.requests
    assert carried  # attempts stored by killed workers count beside those after the kill
    usage = batches.get(USER, batch_id).usage
    assert (usage.input_tokens, usage.requests) == (total_tokens, total_requests)
