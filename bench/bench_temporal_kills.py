"""A 2,000-item batch on Temporal over three worker processes, SIGKILLed and restarted mid-batch.
One command:

    python bench/bench_temporal_kills.py                       # 2,000 items, 3 kills (starts a dev server)
    python bench/bench_temporal_kills.py --items 500 --kills 1 --store postgresql://...

It checks what `tests/test_temporal_kills.py` checks at a few hundred items (every item stored once,
`succeeded`, its usage counted once; no item run to its end twice by a live worker, by the workers' own log; never
more items running at once than `max_running_items`), and prints how long the batch took, when
each kill came, and the same batch's time with no kill in the same session (what the kills cost).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench_temporal import start_server  # noqa: E402
from tests.temporal_kill_scenario import KillOutcome, run_with_kills  # noqa: E402

from delegate.engine import EngineSettings  # noqa: E402


class Server:
    """A Temporal dev server of our own, which can be SIGKILLed and started again on its file."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="bench-temporal-server-"))
        self.process, self.address = start_server(self.folder)

    def kill_and_restart(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        port = int(self.address.rsplit(":", 1)[1])
        self.process, _ = start_server(self.folder, port)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def one(
    address: str, store: str | None, items: int, kills: int, max_running: int, kill_server: Server | None = None
) -> KillOutcome:
    folder = Path(tempfile.mkdtemp(prefix="bench-kills-"))
    engine = EngineSettings.parse(f"temporal://{address}/default?queue=kills-{uuid.uuid4().hex[:8]}&heartbeat=5")
    store_url = store or f"sqlite:///{folder / 'delegate.db'}"
    restart = None if kill_server is None else kill_server.kill_and_restart
    return run_with_kills(
        engine,
        store_url,
        folder,
        items=items,
        kills=kills,
        max_running=max_running,
        timeout=1800,
        kill_server=restart,
    )


def check(outcome: KillOutcome, items: int, max_running: int) -> dict[str, object]:
    rows = outcome.rows
    ended = outcome.ended()
    checks = {
        "completed": outcome.batch.status == "completed",
        "every item stored once, succeeded": len(rows) == items
        and len({r["key"] for r in rows}) == items
        and all(r["status"] == "succeeded" and r["attempts"] == 1 for r in rows),
        "usage counted once": all(r["usage"]["requests"] == 1 for r in rows),
        "every item run to its end": set(ended) == {r["key"] for r in rows},
        "none run to its end twice by a live worker": outcome.ran_twice_alive() == [],
        "runs lost with a killed worker": len(outcome.ends_not_stored()),
        "cap never exceeded": outcome.most_at_once() <= max_running,
    }
    return {
        "seconds": round(outcome.seconds, 1),
        "phases": [(name, round(at, 1)) for name, at in outcome.phases],
        "succeeded_at_kills": outcome.killed_at,
        "most_at_once": outcome.most_at_once(),
        "counts": outcome.batch.counts,
        **checks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", help="HOST:PORT of a running Temporal server (default: start a dev server)")
    parser.add_argument("--store", help="a store URL (default: a SQLite file per batch)")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--max-running", type=int, default=30)
    parser.add_argument(
        "--kill-server", action="store_true", help="also SIGKILL the Temporal server mid-batch and restart it"
    )
    options = parser.parse_args()
    server = None
    address = options.address
    if address is None or options.kill_server:
        server = Server()
        address = server.address
    try:
        results: dict[str, dict[str, object]] = {}
        runs = {"no kill": 0, f"{options.kills} worker kill(s)": options.kills}
        for name, kills in runs.items():
            outcome = one(address, options.store, options.items, kills, options.max_running)
            results[name] = check(outcome, options.items, options.max_running)
            print(f"{options.items} items, 3 workers, {name}: {json.dumps(results[name])}", flush=True)
        if options.kill_server:
            assert server is not None
            outcome = one(address, options.store, options.items, options.kills, options.max_running, server)
            name = f"{options.kills} worker kill(s) and the server's"
            results[name] = check(outcome, options.items, options.max_running)
            print(f"{options.items} items, 3 workers, {name}: {json.dumps(results[name])}", flush=True)
        plain = results["no kill"]["seconds"]
        for name, result in results.items():
            took = result["seconds"]
            assert isinstance(plain, float) and isinstance(took, float)
            print(f"makespan, {name}: {took:.1f} s ({took / plain:.2f}x)")
        ok = all(v is True for r in results.values() for v in r.values() if isinstance(v, bool))
        print("every check holds" if ok else "A CHECK FAILED")
        if not ok:
            raise SystemExit(1)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
