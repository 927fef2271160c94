"""`delegate worker --engine temporal://...` and `delegate batch ... --engine ...` through the real
CLI: worker processes of their own, items on a loopback model server, and SIGKILLs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from delegate import Store
from delegate.batch import Batches
from delegate.engine import EngineSettings
from tests.cli_support import run_cli
from tests.loopback_openai import OpenAIServer
from tests.test_batch_cli import LOCAL_USER, completing, env_for, write_items

from .temporal_support import temporal_fixture  # noqa: F401


def start_worker(env: dict[str, str], cwd: Path, log: Path, name: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "delegate", "worker", "--model", "openai:m", "--name", name]
    with log.open("ab") as out:  # the worker writes to its own copy
        return subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=out)


def test_two_workers_run_a_batch_and_a_killed_one_loses_no_item_nor_counts_one_twice(
    tmp_path: Path, store_url: str, temporal: EngineSettings
) -> None:
    items = write_items(tmp_path / "items.jsonl", 60)
    with OpenAIServer(completing(latency=0.1)) as server:
        env = env_for(server.base_url, db=store_url) | {"DELEGATE_ENGINE": str(temporal)}
        workers = [start_worker(env, tmp_path, tmp_path / f"w{i}.log", f"worker-{i}") for i in range(2)]
        batches = Batches(Store.open(store_url))
        try:
            args = ["batch", "submit", str(items), "--type", "explore", "--model", "openai:m"]
            done = run_cli([*args, "--max-running", "6", "--detach"], env, tmp_path)
            assert done.returncode == 0, done.stderr
            batch_id = done.stdout.strip().splitlines()[-1]
            deadline = time.monotonic() + 120
            while batches.get(LOCAL_USER, batch_id).counts["succeeded"] < 15 and time.monotonic() < deadline:
                time.sleep(0.02)
            workers[0].send_signal(signal.SIGKILL)  # mid-batch: it holds running items
            workers[0].wait(timeout=30)
            killed_at = batches.get(LOCAL_USER, batch_id).counts["succeeded"]
            while not batches.get(LOCAL_USER, batch_id).done and time.monotonic() < deadline + 60:
                time.sleep(0.05)
            status = json.loads(run_cli(["batch", "status", batch_id, "--json"], env, tmp_path).stdout)
            rows = [
                json.loads(line) for line in run_cli(["batch", "export", batch_id], env, tmp_path).stdout.splitlines()
            ]
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=30)
            batches.store.close()
        assert server.max_in_flight <= 6
    assert killed_at < 60
    assert status["status"] == "completed", status
    assert sorted(r["key"] for r in rows) == sorted(f"item-{i}" for i in range(60))
    assert all(r["status"] == "succeeded" and r["attempts"] == 1 for r in rows)
    # What an interrupted attempt spent was never reported, so it is not counted: one request each.
    assert all(r["usage"]["requests"] == 1 for r in rows)


def test_commands_that_run_only_here_refuse_an_engine_on_temporal_rather_than_run_here_unsaid(tmp_path: Path) -> None:
    """`eval run`, `eval resume`, `chat` and `serve` run their work in this process: told to run on Temporal
    (here by DELEGATE_ENGINE, as a deployment sets it), each exits 2 before anything starts."""
    (tmp_path / "suite.yaml").write_text("name: s\ntasks:\n  - id: t\n    prompt: hi\n")
    env = env_for("http://127.0.0.1:9/v1") | {"DELEGATE_ENGINE": "temporal://127.0.0.1:1"}
    commands = {
        "eval run": ["eval", "run", "suite.yaml", "--model", "openai:m"],
        "eval resume": ["eval", "resume", "eval_1"],
        "chat": ["chat", "--model", "openai:m"],
        "serve": ["serve", "--model", "openai:m", "--port", "0"],
    }
    for name, args in commands.items():
        done = run_cli([*args, "-w", str(tmp_path)], env, tmp_path)
        assert done.returncode == 2, (name, done.stderr)
        assert f"`delegate {name}` runs in this process only, not on Temporal yet" in done.stderr, done.stderr
    assert not (tmp_path / ".delegate" / "delegate.db").exists()
