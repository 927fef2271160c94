"""`delegate batch ...` through the real CLI, with the items' model on a loopback server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from delegate._store import Store
from delegate.batch import Batches
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

LOCAL_USER = "default"
"""The user of a CLI without a server (`delegate.cli._batch.LOCAL_USER`)."""


def env_for(base_url: str, db: str | None = None) -> dict[str, str]:
    env = scrubbed_env()
    env["OPENAI_BASE_URL"] = base_url
    if db:
        env["DELEGATE_DB"] = db
    return env


def write_items(path: Path, count: int, **extra: Any) -> Path:
    with path.open("w") as out:
        for i in range(count):
            out.write(json.dumps({"key": f"item-{i}", "prompt": f"summarise item {i}", **extra}) + "\n")
    return path


def batch_status(batch_id: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    return json.loads(run_cli(["batch", "status", batch_id, "--json"], env, cwd).stdout)


def wait_for_end(batch_id: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> dict[str, Any]:
    """Wait until the batch has ended (or `timeout`), then its status as `delegate batch status`
    prints it. The store is read directly while the workers run: a `delegate batch status`
    process each poll took about a second of the two cores the workers under test share."""
    db = env.get("DELEGATE_DB")
    with Store.open(db) if db else Store.for_workspace(cwd) as store:
        batches = Batches(store)
        deadline = time.monotonic() + timeout
        while not batches.get(LOCAL_USER, batch_id).done and time.monotonic() < deadline:
            time.sleep(0.05)
    return batch_status(batch_id, env, cwd)


def completing(latency: float = 0.0):
    def answer(body: dict[str, Any]) -> Reply:
        if latency:
            time.sleep(latency)
        user = next(m for m in body["messages"] if m["role"] == "user")
        return Reply(
            tool_calls=[("complete", {"summary": f"done: {user['content'][:40]}"})],
            prompt_tokens=12,
            completion_tokens=3,
        )

    return answer


def test_submit_runs_the_batch_with_progress_and_prints_the_id_last(tmp_path: Path, store_url: str) -> None:
    """On each backend (the batch's usage is summed by the database: JSON read differently)."""
    items = write_items(tmp_path / "items.jsonl", 25, acceptance_criteria=["file:nothing.md exists"])
    with OpenAIServer(completing()) as server:
        env = env_for(server.base_url, db=store_url)
        done = run_cli(
            [
                "batch",
                "submit",
                str(items),
                "--type",
                "explore",
                "--model",
                "openai:m",
                "--max-running",
                "5",
                "--max-attempts",
                "2",
            ],
            env,
            tmp_path,
        )
        assert done.returncode == 0, done.stderr
        batch_id = done.stdout.strip().splitlines()[-1]
        status = batch_status(batch_id, env, tmp_path)
        exported = run_cli(["batch", "export", batch_id], env, tmp_path).stdout.splitlines()
    assert status["status"] == "completed"
    assert status["counts"]["succeeded"] == 25
    assert status["max_attempts"] == 2
    rows = [json.loads(line) for line in exported]
    assert sorted(r["key"] for r in rows) == sorted(f"item-{i}" for i in range(25))
    row = rows[0]
    assert set(row) >= {"key", "status", "attempts", "summary", "artifacts", "usage", "acceptance"}
    assert row["status"] == "succeeded" and row["attempts"] == 1
    assert row["summary"].startswith("done: summarise item")
    assert row["acceptance"][0]["result"] == "does not hold"  # a verdict, kept apart from the status
    assert row["usage"]["input_tokens"] == 12
    assert row["usage"]["cost_usd"] is None  # a server on this machine has no price
    assert status["usage"] | {"requests": 0} == {  # the batch's usage: its items' summed
        "input_tokens": 25 * 12,
        "output_tokens": 25 * 3,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "requests": 0,
        "requests_without_usage": 0,
        "cost_usd": None,
    }
    assert status["usage"]["requests"] == sum(r["usage"]["requests"] for r in rows)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"key": "a", "prompt": "p"}', "not json"], ":2: not valid JSON"),
        (['{"key": "a", "prompt": "p"}', '{"key": "a", "prompt": "q"}'], "duplicate"),
        (['{"key": "a", "prompt": ""}'], "prompt"),
        (['{"key": "a", "prompt": "p"}', "", '{"key": 2, "prompt": "q"}'], "bad.jsonl:3: key is a number (2)"),
        (['{"key": "a", "prompt": "p"}', '{"key": "b", "prompt": 3}'], "bad.jsonl:2: prompt is a number"),
        (
            ['{"key": "a", "prompt": "p"}', "", '{"key": "b", "prompt": "q", "prompt": "r"}'],
            "bad.jsonl:3: field(s) 'prompt' given more than once; give each field once",
        ),
    ],
)
def test_bad_items_exit_2_and_store_nothing(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    env = env_for("http://127.0.0.1:9/v1")
    done = run_cli(["batch", "submit", str(path), "--type", "explore", "--detach"], env, tmp_path)
    assert done.returncode == 2
    assert message in done.stderr.lower() or message in done.stderr
    from delegate import Store
    from delegate.batch import Batches

    assert Batches(Store.for_workspace(tmp_path)).list_batches("default") == []


def test_unknown_type_and_unknown_batch_exit_2(tmp_path: Path) -> None:
    env = env_for("http://127.0.0.1:9/v1")
    items = write_items(tmp_path / "items.jsonl", 2)
    done = run_cli(["batch", "submit", str(items), "--type", "nope", "--detach"], env, tmp_path)
    assert done.returncode == 2 and "nope" in done.stderr
    done = run_cli(["batch", "status", "b_missing"], env, tmp_path)
    assert done.returncode == 2 and "no batch 'b_missing'" in done.stderr


def test_a_worker_killed_again_and_again_loses_nothing_and_keeps_the_caps(tmp_path: Path, store_url: str) -> None:
    items = write_items(tmp_path / "items.jsonl", 240)
    with OpenAIServer(completing(latency=0.05)) as server:
        env = env_for(server.base_url, db=store_url)
        done = run_cli(
            [
                "batch",
                "submit",
                str(items),
                "--type",
                "explore",
                "--model",
                "openai:m",
                "--detach",
                "--max-running",
                "12",
                "--max-live",
                "16",
            ],
            env,
            tmp_path,
        )
        assert done.returncode == 0, done.stderr
        batch_id = done.stdout.strip().splitlines()[-1]

        # Progress is read from the store here, not by a `delegate batch status` process a poll (a
        # few seconds each on a loaded machine: the test took 121 s, and its kills landed late).
        batches = Batches(Store.open(store_url))

        def succeeded() -> int:
            return batches.get(LOCAL_USER, batch_id).counts["succeeded"]

        worker_args = [sys.executable, "-m", "delegate", "batch", "worker", "--model", "openai:m"]
        log = (tmp_path / "worker.log").open("ab")
        kills_at: list[int] = []
        for round_ in range(3):
            worker = subprocess.Popen(worker_args, cwd=tmp_path, env=env, stdout=log, stderr=log)
            try:
                deadline = time.monotonic() + 120
                while succeeded() < 40 * (round_ + 1) and time.monotonic() < deadline:
                    time.sleep(0.02)
            finally:
                worker.send_signal(signal.SIGKILL)
                worker.wait(timeout=60)
                kills_at.append(succeeded())
        worker = subprocess.Popen(worker_args, cwd=tmp_path, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 120
            while not batches.get(LOCAL_USER, batch_id).done and time.monotonic() < deadline:
                time.sleep(0.05)
            status = batch_status(batch_id, env, tmp_path)  # what the user reads
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
            log.close()
            batches.store.close()
        assert all(done < 240 for done in kills_at), kills_at  # each kill landed in the middle of the batch
        rows = [json.loads(line) for line in run_cli(["batch", "export", batch_id], env, tmp_path).stdout.splitlines()]
        assert server.max_in_flight <= 12
    assert status["status"] == "completed", status
    assert status["counts"]["succeeded"] == 240
    assert len(rows) == 240 and len({r["key"] for r in rows}) == 240
    assert all(r["status"] == "succeeded" for r in rows)


def test_a_batch_left_to_workers_runs_on_the_model_the_lead_submitted_it_with(tmp_path: Path) -> None:
    from delegate.testing import is_lead

    models: list[str] = []

    def answer(body: dict[str, Any]) -> Reply:
        models.append(body["model"])
        if is_lead(body):
            if body["messages"][-1]["role"] == "user":
                items = [{"key": f"k{i}", "prompt": f"look at {i}"} for i in range(5)]
                names = {t["function"]["name"] for t in body["tools"]}
                assert {"batch_task", "batch_status", "cancel_batch"} <= names
                return Reply(tool_calls=[("batch_task", {"title": "five", "subagent_type": "explore", "items": items})])
            return Reply(content=body["messages"][-1]["content"])
        return Reply(tool_calls=[("complete", {"summary": "looked"})])

    with OpenAIServer(answer) as server:
        env = env_for(server.base_url)
        done = run_cli(["run", "fan out five", "--model", "openai:m", "--json", "--detach-batches"], env, tmp_path)
        assert done.returncode == 0, done.stderr
        final = json.loads(done.stdout)["final"]
        assert "accepted with 5 items" in final and "survives restarts" in final
        assert "`delegate batch worker` runs it" in done.stderr
        batch_id = final.split()[1]
        worker = subprocess.Popen(  # its own default model is another one: the batch's wins
            [sys.executable, "-m", "delegate", "batch", "worker", "--model", "openai:other"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            status = wait_for_end(batch_id, env, tmp_path, timeout=120)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    assert status["counts"]["succeeded"] == 5
    assert set(models) == {"m"}


def test_delegate_run_runs_the_batches_its_lead_submits_and_waits_for_them(tmp_path: Path) -> None:
    from delegate.testing import is_lead

    def answer(body: dict[str, Any]) -> Reply:
        if is_lead(body):
            last = body["messages"][-1]
            if last["role"] == "user":
                items = [{"key": f"k{i}", "prompt": f"look at {i}"} for i in range(5)]
                return Reply(tool_calls=[("batch_task", {"title": "five", "subagent_type": "explore", "items": items})])
            if "accepted with 5 items" in last["content"] or "running" in last["content"]:
                batch_id = last["content"].split()[1] if "accepted" in last["content"] else _batch_of(body)
                time.sleep(0.05)  # a lead that polls, as a model would, between its turns
                return Reply(tool_calls=[("batch_status", {"batch_id": batch_id})])
            return Reply(content=last["content"])
        return Reply(tool_calls=[("complete", {"summary": "looked"})])

    with OpenAIServer(answer) as server:
        env = env_for(server.base_url)
        args = ["run", "fan out five", "--model", "openai:m", "--json", "--max-steps", "500"]
        done = run_cli(args, env, tmp_path)
        assert done.returncode == 0, done.stderr
        final = json.loads(done.stdout)["final"]
        batch_id = final.split()[1]
        assert f"Batch {batch_id} (5 items) ended completed." in done.stderr
        status = json.loads(run_cli(["batch", "status", batch_id, "--json"], env, tmp_path).stdout)
    assert status["status"] == "completed" and status["counts"]["succeeded"] == 5
    assert final == f"Batch {batch_id} (five) is completed: 5 succeeded of 5."  # what its batch_status saw


def _batch_of(body: dict[str, Any]) -> str:
    for message in body["messages"]:
        content = message.get("content") or ""
        if isinstance(content, str) and content.startswith("Batch "):
            return content.split()[1]
    raise AssertionError("no batch id in the conversation")


def test_two_workers_share_one_batch_within_its_caps(tmp_path: Path, store_url: str) -> None:
    """Two `delegate batch worker` processes on one database (SQLite, and PostgreSQL when
    DELEGATE_TEST_PG is set) share a batch; each names its model, so the server tells them apart."""
    items = write_items(tmp_path / "items.jsonl", 120)
    answer = completing(latency=0.1)
    by_model: dict[str, int] = {}

    def counted(body: dict[str, Any]) -> Reply:
        by_model[body["model"]] = by_model.get(body["model"], 0) + 1
        return answer(body)

    with OpenAIServer(counted) as server:
        env = env_for(server.base_url, db=store_url)
        submit = [
            "batch",
            "submit",
            str(items),
            "--type",
            "explore",
            "--detach",
            "--max-running",
            "8",
            "--max-live",
            "10",
        ]
        done = run_cli(submit, env, tmp_path)
        assert done.returncode == 0, done.stderr
        batch_id = done.stdout.strip().splitlines()[-1]
        log = (tmp_path / "workers.log").open("ab")
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "delegate", "batch", "worker", "--model", f"openai:{name}"],
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=log,
            )
            for name in ("alpha", "beta")
        ]
        try:
            status = wait_for_end(batch_id, env, tmp_path, timeout=120)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=30)
            log.close()
        assert server.max_in_flight <= 8
    assert status["status"] == "completed" and status["counts"]["succeeded"] == 120
    assert sum(by_model.values()) == 120
    assert by_model.get("alpha", 0) > 0 and by_model.get("beta", 0) > 0, by_model


def test_batch_list_shows_every_users_batches_to_the_operator_and_status_reads_an_http_users_batch(
    tmp_path: Path,
) -> None:
    """The operator sees what HTTP users submitted, as `runs list` shows every user's runs;
    `--user` narrows the list to one user (`default`: the command line's own)."""
    store = Store.for_workspace(tmp_path)
    alice, _ = store.add_user("alice")
    batches = Batches(store)
    items = [{"key": "a", "prompt": "Look at a."}]
    hers = batches.submit(alice, subagent_type="explore", items=items, title="alice's review").batch
    mine = batches.submit("default", subagent_type="explore", items=items, title="my review").batch
    store.close()

    listed = json.loads(run_cli(["batch", "list", "--json"], cwd=tmp_path).stdout)
    assert sorted((b["id"], b["user"]) for b in listed) == sorted([(mine.id, "default"), (hers.id, "alice")])
    assert [
        b["id"] for b in json.loads(run_cli(["batch", "list", "--user", "alice", "--json"], cwd=tmp_path).stdout)
    ] == [hers.id]
    table = run_cli(["batch", "list"], env=scrubbed_env() | {"COLUMNS": "160"}, cwd=tmp_path).stdout
    assert "alice's review" in table and "my review" in table and "0/1" in table
    status = run_cli(["batch", "status", hers.id, "--json"], cwd=tmp_path)
    assert status.returncode == 0 and json.loads(status.stdout)["title"] == "alice's review"
    unknown = run_cli(["batch", "list", "--user", "bob"], cwd=tmp_path)
    assert unknown.returncode == 2 and "no user 'bob'" in unknown.stderr
