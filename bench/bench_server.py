"""Benchmarks of `delegate serve` under a hostile neighbour (issue 9's targets). One command:

    python bench/bench_server.py              # both parts (about 2 minutes)
    python bench/bench_server.py --quick      # 100 batches instead of 1,000, for a smoke test
    python bench/bench_server.py --no-memory  # the latency part alone

The server runs in a process of its own (uvicorn on loopback, the workspace's SQLite store, fake
models that answer at once), so its event loop and memory are measured as a user would meet them.

- latency: bob's 200 concurrent `GET /runs?limit=50` (over his 50 finished runs), on a quiet
  server (the baseline), and while alice's agent greps `(a+)+$` over a line of 40 `a`s (a
  catastrophic regex for a backtracking engine) again and again, and another process holds the
  store's write lock (`BEGIN IMMEDIATE` in a `sqlite3` connection, as a busy `delegate batch
  worker` would). Target: p95 <= 1 s. The two bursts run in turn, `--repeats` times on one
  server, and each figure is the median of its repeats. The server's CPU time per request (which
  the other processes of a shared machine disturb less than wall time) is measured for
  `limit=1` and `limit=50` one request at a time, and over each burst; and the CPU time alice's
  search processes used during the loaded burst shows that they were at work.
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
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

LEAD_STEPS = 100_000
"""The lead's step limit: alice's agent greps again and again, until the bench cancels its run."""
MODEL_SECONDS = 0.01
"""How long alice's model takes to answer (a fast one). What her agent's own turns cost is hers
to spend (out of scope in docs/security.md); what is measured is what her greps cost the others.
A model that answered at once would make her lead spin through hundreds of turns a second, each
costlier than the last as its history grows."""


# -- the server, in its own process ------------------------------------------------------------


def serve(workspace: Path, run_batches: bool) -> None:
    """Run `delegate serve`'s app with fake models; print the port once it listens."""
    import socket

    import uvicorn

    from delegate import Lead, LoopSettings, RunLimits, RuntimeSettings, Store
    from delegate.models import ModelRequest, ModelResponse
    from delegate.server import ServerSettings, create_app, uvicorn_config
    from delegate.testing import FunctionModel, call, reply

    async def answer(request: ModelRequest) -> ModelResponse:
        if "complete" in {t.name for t in request.tools}:  # a batch item's subagent
            return call("complete", summary="done")
        prompt = request.messages[0].text
        if "grep" in prompt:
            await asyncio.sleep(MODEL_SECONDS)
            return call("grep", pattern="(a+)+$", path="long.txt")
        return reply("done")

    # The server's own runtimes, but with a lead that may take LEAD_STEPS steps, and no loop guard
    # (it would end alice's agent after ten greps alike).
    store = Store.for_workspace(workspace)
    operator = RuntimeSettings(
        workspace=workspace,
        lead=Lead(max_steps=LEAD_STEPS),
        limits=RunLimits(max_parallel=4),
        loop=LoopSettings(guard=None),
    )
    fake = lambda _: FunctionModel(answer)  # noqa: E731 - the model of every run: ready at once
    settings = ServerSettings(runtime=operator, model=fake, run_batches=run_batches)
    app = create_app(settings, store=store)
    sock = socket.create_server(("127.0.0.1", 0))
    print(f"ready {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn_config(app)).run(sockets=[sock])


class Server:
    """The server process: started on a workspace, stopped (killed if it must be) at the end."""

    def __init__(self, workspace: Path, *, run_batches: bool) -> None:
        command = [sys.executable, __file__, "--serve", str(workspace)]
        if run_batches:
            command.append("--batches")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        self.workspace = workspace
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


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds(pid: int) -> float:
    """CPU time used so far by the live child processes of `pid` (the server's search processes)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


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


async def raw_burst(url: str, token: str, n: int, timeout: float) -> list[float]:
    """The same burst from a client that costs next to nothing: each of `n` connections sends one
    `GET /runs?limit=50` as raw HTTP/1.1 and reads the answer whole. Two hundred users send from
    their own machines; here the client shares the server's two cores, and `httpx2`'s own work
    (about 2 ms of CPU a request) would be counted as the server's latency."""
    address = urlsplit(url)
    host, port = address.hostname or "127.0.0.1", address.port or 80
    request = (
        f"GET {address.path}/runs?limit=50 HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    ).encode()

    async def one() -> float:
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                fields = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
                await reader.readexactly(int(fields["content-length"]))
                writer.close()
        except (OSError, TimeoutError, KeyError, ValueError, asyncio.IncompleteReadError):
            return timeout
        return time.perf_counter() - start if lines[0].split()[1] == "200" else timeout

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def one_by_one(url: str, token: str, n: int, limit: int) -> None:
    """`n` `GET /runs?limit=...` one after the other, on one connection."""
    import httpx2

    async with httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        for _ in range(n):
            (await client.get("/runs", params={"limit": limit})).raise_for_status()


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def latency(concurrent: int, regex_chars: int, timeout: float, repeats: int) -> dict[str, Any]:
    """Quiet and loaded bursts in turn, `repeats` times each, on one server; medians of each figure."""
    from delegate import Store
    from delegate._usage import Usage

    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        workspace = Path(tmp)
        with Store.for_workspace(workspace) as store:
            alice_id, alice = store.add_user("alice")
            _, bob = store.add_user("bob")
            bob_id = store.user_for_token(bob)
            for n in range(50):  # finished runs, with prompts and answers of a realistic length
                run = store.create_run(
                    prompt=f"bob's run {n}: " + "do this and that. " * 80, model="test", user_id=bob_id
                )
                store.finish_run(
                    run.id,
                    "completed",
                    "the answer, with its reasons. " * 100,
                    Usage(input_tokens=1200, output_tokens=300),
                )
        line = "a" * regex_chars + "!\n"
        # Where alice's agent works: the workspace (one user), or its own folder (a server with a
        # folder per user, docs/http.md).
        for folder in (workspace, workspace / ".delegate" / "users" / alice_id):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "long.txt").write_text(line)
        server = Server(workspace, run_batches=False)
        pid = server.proc.pid
        figures: dict[str, list[float]] = {}

        def note(name: str, value: float) -> None:
            figures.setdefault(name, []).append(value)

        try:
            asyncio.run(burst(server.url, bob, 20, timeout))  # warm up connections and imports
            for _ in range(repeats):
                for limit in (1, 50):  # server CPU per request, one at a time on a quiet server
                    used = cpu_seconds(pid)
                    asyncio.run(one_by_one(server.url, bob, 200, limit))
                    note(f"cpu_ms_per_get_limit_{limit}", (cpu_seconds(pid) - used) * 1000 / 200)
                used, client_used = cpu_seconds(pid), time.process_time()
                quiet = asyncio.run(burst(server.url, bob, concurrent, timeout))
                note("quiet_cpu_ms_per_get", (cpu_seconds(pid) - used) * 1000 / concurrent)
                note("httpx2_client_cpu_ms_per_get", (time.process_time() - client_used) * 1000 / concurrent)
                note("quiet_p50_s", statistics.median(quiet))
                note("quiet_p95_s", p95(quiet))
                raw = asyncio.run(raw_burst(server.url, bob, concurrent, timeout))
                note("raw_quiet_p95_s", p95(raw))
                loaded, raw_loaded, grep_ms, cpu_ms = _loaded_burst(server, alice, bob, concurrent, timeout)
                note("loaded_p50_s", statistics.median(loaded))
                note("loaded_p95_s", p95(loaded))
                note("raw_loaded_p50_s", statistics.median(raw_loaded))
                note("raw_loaded_p95_s", p95(raw_loaded))
                note("loaded_cpu_ms_per_get", cpu_ms / concurrent)
                note("grep_cpu_ms_during_burst", grep_ms)
                note("unanswered", sum(1 for t in [*loaded, *raw_loaded] if t >= timeout))
        finally:
            server.stop()
    result: dict[str, Any] = {"concurrent": concurrent, "regex_chars": regex_chars, "repeats": repeats}
    result |= {name: statistics.median(values) for name, values in figures.items()}
    result["loaded_p95_all_s"] = figures["loaded_p95_s"]
    result["quiet_p95_all_s"] = figures["quiet_p95_s"]
    result["raw_loaded_p95_all_s"] = figures["raw_loaded_p95_s"]
    return result


def _loaded_burst(
    server: Server, alice: str, bob: str, concurrent: int, timeout: float
) -> tuple[list[float], list[float], float, float]:
    """Bob's burst (from `httpx2`, then from the raw client) while alice's agent greps and another
    process holds the write lock; with the CPU alice's search processes used during the first, and
    the server's own, in ms."""
    import httpx2

    headers = {"Authorization": f"Bearer {alice}"}
    with httpx2.Client(base_url=server.url, headers=headers, timeout=timeout) as client:
        started = client.post("/runs", json={"prompt": "grep the long line"})
        if started.status_code != 202:
            raise RuntimeError(f"alice's run did not start: {started.text}")
        run_id = started.json()["run_id"]
        if not _wait_for_grep(client, run_id, timeout):
            raise RuntimeError("alice's agent never started its grep")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(server.workspace / ".delegate" / "delegate.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
            grep_used, used = children_cpu_seconds(server.proc.pid), cpu_seconds(server.proc.pid)
            loaded = asyncio.run(burst(server.url, bob, concurrent, timeout))
            grep_ms = (children_cpu_seconds(server.proc.pid) - grep_used) * 1000
            cpu_ms = (cpu_seconds(server.proc.pid) - used) * 1000
            raw = asyncio.run(raw_burst(server.url, bob, concurrent, timeout))
        finally:
            holder.communicate(b"", timeout=30)
        cancelled = client.post(f"/runs/{run_id}/cancel")
        if cancelled.status_code != 200:
            raise RuntimeError(f"alice's run ended during the burst: {client.get(f'/runs/{run_id}').json()}")
    return loaded, raw, grep_ms, cpu_ms


def _wait_for_grep(client: Any, run_id: str, timeout: float) -> bool:
    """Follow alice's run until its agent has started a grep (or the stream ends without one)."""
    with client.stream("GET", f"/runs/{run_id}/events", timeout=timeout) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and '"grep"' in line:
                return True
    return False


# -- part 2: memory after 10 and after 1,000 batches ---------------------------------------------


def memory(batches: int) -> dict[str, Any]:
    import httpx2

    from delegate import Store

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
    parser.add_argument("--repeats", type=int, default=5, help="quiet and loaded bursts, in turn (default 5)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds a GET may take before it counts as lost")
    parser.add_argument("--no-memory", action="store_true", help="skip part 2 (memory after many batches)")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batches", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.batches)
        return
    load = os.getloadavg()[0]
    lat = latency(args.concurrent, args.regex_chars, args.timeout, args.repeats)
    lat["load_average_1m"] = [load, os.getloadavg()[0]]
    print(json.dumps({"latency": lat}), flush=True)
    print(
        f"\nGET /runs x{lat['concurrent']} (medians of {lat['repeats']}): p95 {lat['loaded_p95_s']:.3f} s under a "
        f"(a+)+$ grep over {lat['regex_chars']} chars and a held write lock (target <= 1 s), p50 "
        f"{lat['loaded_p50_s']:.3f} s, {lat['unanswered']:g} unanswered; quiet baseline p95 {lat['quiet_p95_s']:.3f} s "
        f"(ratio {lat['loaded_p95_s'] / lat['quiet_p95_s']:.2f}x). Server CPU per GET: "
        f"{lat['cpu_ms_per_get_limit_1']:.2f} ms (limit=1, one at a time), {lat['cpu_ms_per_get_limit_50']:.2f} ms "
        f"(limit=50), {lat['quiet_cpu_ms_per_get']:.2f} ms in the quiet burst, {lat['loaded_cpu_ms_per_get']:.2f} ms "
        f"in the loaded one (alice's agent loop included; her search processes: "
        f"{lat['grep_cpu_ms_during_burst']:.0f} ms of CPU during it). Load average {load:.2f} -> "
        f"{os.getloadavg()[0]:.2f}.\nFrom a raw HTTP client (next to no CPU of its own; httpx2 spent "
        f"{lat['httpx2_client_cpu_ms_per_get']:.2f} ms a request): p95 {lat['raw_loaded_p95_s']:.3f} s loaded "
        f"(target <= 1 s), p50 {lat['raw_loaded_p50_s']:.3f} s; quiet p95 {lat['raw_quiet_p95_s']:.3f} s "
        f"(ratio {lat['raw_loaded_p95_s'] / lat['raw_quiet_p95_s']:.2f}x)",
        flush=True,
    )
    if args.no_memory:
        return
    mem = memory(100 if args.quick else 1000)
    print(json.dumps({"memory": mem}), flush=True)
    print(
        f"RSS after 10 batches {mem['rss_after_10_mb']:.1f} MB, after {mem['batches']} "
        f"{mem['rss_after_all_mb']:.1f} MB: growth {mem['growth_mb']:+.1f} MB (target <= 50 MB), "
        f"{mem['seconds']:.0f} s"
    )


if __name__ == "__main__":
    main()
