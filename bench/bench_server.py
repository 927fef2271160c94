"""Benchmarks of `delegate serve` under a hostile neighbour (issue 9's targets). One command:

    python bench/bench_server.py              # both parts (about 2 minutes)
    python bench/bench_server.py --quick      # 100 batches instead of 1,000, for a smoke test

The server runs in a process of its own (uvicorn on loopback, the workspace's SQLite store, fake
models that answer at once), so its event loop and memory are measured as a user would meet them.

- latency: bob's 200 concurrent `GET /runs`, first on a quiet server (the baseline), then while
  alice's agent greps `(a+)+$` over a line of 40 `a`s (a catastrophic regex for a backtracking
  engine) again and again, and another process holds the store's write lock (`BEGIN IMMEDIATE`
  in a `sqlite3` connection, as a busy `delegate batch worker` would). Target: p95 <= 1 s.
- memory: the server's resident memory (RSS) after 10 batches have run, and after 1,000 (each
  submitted over HTTP, one item, run by the server's own worker). Target: within 50 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

GREP_TURNS = 40
"""How many times alice's agent greps before it answers (it is still grepping during the burst)."""


# -- the server, in its own process ------------------------------------------------------------


def serve(workspace: Path, run_batches: bool) -> None:
    """Run `delegate serve`'s app with fake models; print the port once it listens."""
    import socket

    import uvicorn

    from delegate.models import ModelRequest, ModelResponse
    from delegate.server import ServerSettings, create_app, uvicorn_config
    from delegate.testing import FunctionModel, call, reply

    def answer(request: ModelRequest) -> ModelResponse:
        if "complete" in {t.name for t in request.tools}:  # a batch item's subagent
            return call("complete", summary="done")
        prompt = request.messages[0].text
        turns = sum(1 for m in request.messages if m.role == "assistant")
        if "grep" in prompt and turns < GREP_TURNS:
            return call("grep", pattern="(a+)+$", path="long.txt")
        return reply("done")

    settings = ServerSettings(
        workspace=workspace, model=lambda _: FunctionModel(answer), run_batches=run_batches, max_parallel=4
    )
    app = create_app(settings)
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"ready {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn_config(app)).run(sockets=[sock])


class Server:
    """The server process: started on a workspace, stopped (killed if it must be) at the end."""

    def __init__(self, workspace: Path, *, run_batches: bool) -> None:
        command = [sys.executable, __file__, "--serve", str(workspace)]
        if run_batches:
            command.append("--batches")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "ready":
            raise RuntimeError("the server did not start")
        self.url = f"http://127.0.0.1:{line[1]}/api/v1"

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:  # a grep that never ends holds the loop: no clean exit
            self.proc.kill()
            self.proc.wait()


HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
"""


# -- part 1: latency under a catastrophic regex and a held write lock ---------------------------


async def burst(url: str, token: str, n: int, timeout: float) -> list[float]:
    """`n` concurrent `GET /runs`; the seconds each took (`timeout` for one that got no answer)."""
    import httpx2

    limits = httpx2.Limits(max_connections=n, max_keepalive_connections=n)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=timeout) as client:

        async def one() -> float:
            start = time.perf_counter()
            try:
                response = await client.get("/runs", params={"limit": 50})
                if response.status_code != 200:
                    return timeout
            except httpx2.HTTPError:
                return timeout
            return time.perf_counter() - start

        return list(await asyncio.gather(*(one() for _ in range(n))))


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def latency(concurrent: int, regex_chars: int, timeout: float) -> dict[str, Any]:
    import httpx2

    from delegate._store import Store

    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        workspace = Path(tmp)
        with Store.for_workspace(workspace) as store:
            alice_id, alice = store.add_user("alice")
            bob_id, bob = store.add_user("bob")
            for n in range(50):
                store.create_run(prompt=f"bob's run {n}", model="test", user_id=bob_id)
        line = "a" * regex_chars + "!\n"
        # Where alice's agent works: the workspace (one user), or its own folder (a server with a
        # folder per user, docs/http.md).
        for folder in (workspace, workspace / ".delegate" / "users" / alice_id):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "long.txt").write_text(line)
        server = Server(workspace, run_batches=False)
        holder: subprocess.Popen[bytes] | None = None
        try:
            asyncio.run(burst(server.url, bob, 20, timeout))  # warm up connections and imports
            quiet = asyncio.run(burst(server.url, bob, concurrent, timeout))
            headers = {"Authorization": f"Bearer {alice}"}
            grepping = False
            with httpx2.Client(base_url=server.url, headers=headers, timeout=timeout) as client:
                try:
                    run_id = client.post("/runs", json={"prompt": "grep the long line"}).json()["run_id"]
                except httpx2.TimeoutException:
                    pass  # the grep froze the server before it could answer: the burst shows how long
                else:
                    grepping = _wait_for_grep(client, run_id, timeout)
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLD_LOCK, str(workspace / ".delegate" / "delegate.db")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
            loaded = asyncio.run(burst(server.url, bob, concurrent, timeout))
        finally:
            if holder is not None:
                holder.communicate(b"", timeout=30)
            server.stop()
    return {
        "concurrent": concurrent,
        "regex_chars": regex_chars,
        "grep_seen_running": grepping,
        "quiet_p50_s": statistics.median(quiet),
        "quiet_p95_s": p95(quiet),
        "loaded_p50_s": statistics.median(loaded),
        "loaded_p95_s": p95(loaded),
        "unanswered": sum(1 for t in loaded if t >= timeout),
    }


def _wait_for_grep(client: Any, run_id: str, timeout: float) -> bool:
    """Follow alice's run until its agent has started a grep (or the stream gives nothing)."""
    try:
        with client.stream("GET", f"/runs/{run_id}/events", timeout=timeout) as response:
            for line in response.iter_lines():
                if line.startswith("data:") and '"grep"' in line:
                    return True
    except Exception:  # the loop is frozen by the regex: that is what the burst will show
        return False
    return False


# -- part 2: memory after 10 and after 1,000 batches ---------------------------------------------


def memory(batches: int) -> dict[str, Any]:
    import httpx2

    from delegate._store import Store

    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        workspace = Path(tmp)
        with Store.for_workspace(workspace) as store:
            _, token = store.add_user("alice")
        server = Server(workspace, run_batches=True)
        headers = {"Authorization": f"Bearer {token}"}
        try:
            with httpx2.Client(base_url=server.url, headers=headers, timeout=120) as client:
                started = time.perf_counter()
                _run_batches(client, 10)
                after_10 = server.rss_mb()
                _run_batches(client, batches - 10)
                after_all = server.rss_mb()
                elapsed = time.perf_counter() - started
        finally:
            server.stop()
    return {
        "batches": batches,
        "rss_after_10_mb": after_10,
        "rss_after_all_mb": after_all,
        "growth_mb": after_all - after_10,
        "seconds": elapsed,
    }


def _run_batches(client: Any, n: int, wave: int = 50) -> None:
    """Submit `n` one-item batches, `wave` at a time, each wave waited for until every one is done."""
    for first in range(0, n, wave):
        ids = []
        for k in range(first, min(n, first + wave)):
            body = {"subagent_type": "general-purpose", "items": [{"key": "only", "prompt": f"item {k}"}]}
            response = client.post("/batches", json=body)
            response.raise_for_status()
            ids.append(response.json()["id"])
        for batch_id in ids:
            deadline = time.monotonic() + 120
            while client.get(f"/batches/{batch_id}").json()["status"] not in ("completed", "failed", "cancelled"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"batch {batch_id} did not end")
                time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 batches instead of 1,000")
    parser.add_argument("--concurrent", type=int, default=200, help="GET /runs at once (default 200)")
    parser.add_argument("--regex-chars", type=int, default=40, help="length of the line of a's (default 40)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds a GET may take before it counts as lost")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batches", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.batches)
        return
    lat = latency(args.concurrent, args.regex_chars, args.timeout)
    print(json.dumps({"latency": lat}), flush=True)
    mem = memory(100 if args.quick else 1000)
    print(json.dumps({"memory": mem}), flush=True)
    print(
        f"\nGET /runs x{lat['concurrent']}: p95 {lat['loaded_p95_s']:.3f} s under a (a+)+$ grep over "
        f"{lat['regex_chars']} chars and a held write lock (target <= 1 s), p50 {lat['loaded_p50_s']:.3f} s; "
        f"quiet baseline p95 {lat['quiet_p95_s']:.3f} s (ratio {lat['loaded_p95_s'] / lat['quiet_p95_s']:.2f}x); "
        f"{lat['unanswered']} unanswered"
    )
    print(
        f"RSS after 10 batches {mem['rss_after_10_mb']:.1f} MB, after {mem['batches']} "
        f"{mem['rss_after_all_mb']:.1f} MB: growth {mem['growth_mb']:+.1f} MB (target <= 50 MB), "
        f"{mem['seconds']:.0f} s"
    )


if __name__ == "__main__":
    main()
