"""A run's gates are the run's: the rules that can stop a call (`--ask`, `--deny`, the permission
mode, hooks) are stored with the run, and every process that resumes it or takes it over applies
them. A call that waited when its process was killed waits again, whoever goes on with the run; a
resume may add rules, never drop one silently."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import httpx2

from delegate import Extensions, Permissions, Runtime, Store, UserError
from delegate.run import Gates, tightened
from tests.approvals_support import Writers, waiting_calls
from tests.cli_support import delegate
from tests.durable_support import cli_env, wait_for
from tests.loopback_openai import OpenAIServer
from tests.test_approval_crashes import killed_while_waiting
from tests.test_run_crashes import Processes
from tests.test_run_crashes import procs as procs  # the fixture


def _waiting_again(store: Store, run_id: str) -> None:
    """Wait until the process that went on with `run_id` asks again (its run reads `waiting`)."""

    def asked() -> bool:
        run = store.get_run(run_id)
        return run is not None and run.status == "waiting" and bool(store.approvals(run_id, pending=True))

    wait_for(asked, 120, what="the resumed run's call to wait for a person again")


def test_a_write_that_waited_when_delegate_run_was_killed_waits_again_on_a_plain_resume(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    with killed_while_waiting(procs, store_url, tmp_path) as (env, store, call):
        resumed = procs.spawn(
            ["run", "--resume", call.run_id, "--model", "openai:m", "--json", "-w", str(tmp_path)],
            env,
            tmp_path / "resumed.log",
        )
        _waiting_again(store, call.run_id)
        (again,) = store.approvals(call.run_id, pending=True)
        assert (again.tool, again.rule, again.arguments["path"]) == ("write_file", "Write", "notes.md")
        assert not (tmp_path / "notes.md").exists()
        denied = subprocess.run(
            delegate("runs", "approve", call.run_id, "--all", "--deny", "--reason", "no", "-w", str(tmp_path)),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert denied.returncode == 0, denied.stderr
        assert resumed.wait(timeout=120) == 0, (tmp_path / "resumed.log").read_text()
        ended = store.get_run(call.run_id)
        assert ended is not None and ended.status == "completed"
        assert [(a.decision, a.reason) for a in store.approvals(call.run_id)] == [("deny", "no")]
    assert not (tmp_path / "notes.md").exists()


def test_an_approval_timeout_given_on_resume_denies_the_call_that_waits_again(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    """`--approval-timeout` with `--resume` is the resumed run's (it was the stored one's, none):
    the write that waited when the run was killed waits again, nobody decides, and it is denied."""
    with killed_while_waiting(procs, store_url, tmp_path) as (env, store, call):
        args = ["run", "--resume", call.run_id, "--model", "openai:m", "--json", "--approval-timeout", "0.5"]
        resumed = procs.spawn([*args, "-w", str(tmp_path)], env, tmp_path / "resumed.log")
        assert resumed.wait(timeout=120) == 0, (tmp_path / "resumed.log").read_text()
        assert [(a.decision, a.reason) for a in store.approvals(call.run_id)] == [("deny", "no decision within 0.5 s")]
    assert not (tmp_path / "notes.md").exists()


def test_a_resume_that_allows_what_the_run_asked_about_keeps_the_run_rule_and_says_so(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    with killed_while_waiting(procs, store_url, tmp_path) as (env, store, call):
        args = ["run", "--resume", call.run_id, "--model", "openai:m", "--json", "--allow", "Write"]
        resumed = procs.spawn([*args, "-w", str(tmp_path)], env, tmp_path / "resumed.log")
        _waiting_again(store, call.run_id)
        assert not (tmp_path / "notes.md").exists()
        store.decide_approval(call.run_id, store.approvals(call.run_id, pending=True)[0].call_id, "approve", "ok")
        assert resumed.wait(timeout=120) == 0
        said = (tmp_path / "resumed.log").read_text()
        assert "--allow Write: not applied on resume" in said
    assert (tmp_path / "notes.md").read_text() == "notes for notes.md\n"  # written once a person approved


def _served_write_waiting(
    procs: Processes, store_url: str, env: dict[str, str], root: Path, log: Path
) -> tuple[subprocess.Popen[str], Store, str, str]:
    """A `delegate serve --ask Write` whose user's run waits on its subagent's write: the server,
    the store, the run's id and the user's token."""
    store = Store.open(store_url)
    _, token = store.add_user("ada")
    proc, url = procs.serve(store_url, env, root, log, "--ask", "Write")
    headers = {"Authorization": f"Bearer {token}"}
    run_id = httpx2.post(f"{url}/api/v1/runs", json={"prompt": "write notes"}, headers=headers, timeout=30).json()[
        "run_id"
    ]
    (call,) = waiting_calls(store)
    assert call.run_id == run_id
    wait_for(lambda: len(store.checkpoints(run_id)) >= 2, what="the answers so far to be stored")
    proc.kill()
    proc.wait(timeout=30)
    return proc, store, run_id, token


@contextmanager
def _taken_over(
    procs: Processes, store_url: str, tmp_path: Path, taker: Callable[[dict[str, str], Path], subprocess.Popen[str]]
) -> Iterator[tuple[Store, str]]:
    """A served run whose write waits for a decision, its server killed and the run taken over by
    `taker` (started with the environment and the served folder; killed after): the store and the
    run's id once its write waits again, nothing written yet."""
    root = tmp_path / "served"
    root.mkdir()
    with OpenAIServer(Writers("notes.md")) as server:
        env = cli_env(server.base_url)
        _, store, run_id, _ = _served_write_waiting(procs, store_url, env, root, tmp_path / "serve0.log")
        try:
            second = taker(env, root)
            _waiting_again(store, run_id)
            run = store.get_run(run_id)
            assert run is not None and run.workspace is not None
            assert not (Path(run.workspace) / "notes.md").exists()
            yield store, run_id
            second.kill()
        finally:
            store.close()


def _decided(store: Store, run_id: str, decision: Literal["approve", "deny"]) -> Path:
    """The run's workspace, once its waiting call is decided so and the run completed."""
    store.decide_approval(run_id, store.approvals(run_id, pending=True)[0].call_id, decision, "said")
    ended = wait_for(lambda: (r := store.get_run(run_id)) is not None and r.status == "completed" and r, 120)
    assert ended.workspace is not None
    return Path(ended.workspace)


def test_a_second_server_without_the_ask_rule_takes_the_run_over_and_its_write_waits_again(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    def server(env: dict[str, str], root: Path) -> subprocess.Popen[str]:
        return procs.serve(store_url, env, root, tmp_path / "serve1.log")[0]  # no --ask

    with _taken_over(procs, store_url, tmp_path, server) as (store, run_id):
        assert not (_decided(store, run_id, "deny") / "notes.md").exists()


def test_a_batch_worker_taking_the_run_over_applies_its_ask_rule(
    procs: Processes, store_url: str, tmp_path: Path
) -> None:
    def worker(env: dict[str, str], root: Path) -> subprocess.Popen[str]:
        worker_args = ["batch", "worker", "--model", "openai:m", "-w", str(root), "--db", store_url]
        return procs.spawn(worker_args, env, tmp_path / "worker.log")  # no --ask

    with _taken_over(procs, store_url, tmp_path, worker) as (store, run_id):
        assert (_decided(store, run_id, "approve") / "notes.md").read_text() == "notes for notes.md\n"


def _gates(tmp_path: Path, **rules: object) -> Gates:
    rt = Runtime(
        model="openai:m",
        workspace=tmp_path,
        store=False,
        extensions=Extensions(permissions=Permissions(settings_files=False, **rules)),  # type: ignore[arg-type]
    )
    return rt.gates


def test_a_resume_adds_ask_and_deny_rules_and_keeps_the_stricter_mode(tmp_path: Path) -> None:
    stored = _gates(tmp_path, ask=["Write"], mode="plan").stored()
    given = _gates(tmp_path, deny=["Bash"], ask=["Edit"], allow=["Read"], mode="bypassPermissions")
    gates, said = tightened(given, stored)
    assert gates.permissions.ask == ("Write", "Edit") and gates.permissions.deny == ("Bash",)
    assert gates.permissions.allow == () and gates.permissions.mode == "plan"
    assert any("--allow Read" in s for s in said) and any("bypassPermissions" in s for s in said)
    assert gates.policy.verdict("write_file", {"path": "a.md"}).kind != "allow"


def test_stored_gates_that_cannot_be_read_back_refuse_the_resume(tmp_path: Path) -> None:
    given = _gates(tmp_path)
    for bad in ({"ask": "Write"}, {"ask": ["Nope(("]}, {"mode": "yolo"}, {"hooks": [{"hooks": 3, "file": "x"}]}):
        try:
            tightened(given, bad)
        except UserError as exc:
            assert "stored rules" in str(exc)
        else:
            raise AssertionError(f"{bad} was taken")


def test_runs_show_and_the_store_keep_the_gates_a_run_started_under(tmp_path: Path) -> None:
    from delegate.testing import FunctionModel, reply

    rt = Runtime(
        model=FunctionModel(lambda request: reply("hi")),
        workspace=tmp_path,
        extensions=Extensions(permissions=Permissions(settings_files=False, ask=["Write"], deny=["Bash(rm:*)"])),
    )
    result = rt.run_sync("hello")
    with Store.for_workspace(tmp_path) as store:
        run = store.get_run(result.run_id)
    assert run is not None and run.gates is not None
    assert run.gates["ask"] == ["Write"] and run.gates["deny"] == ["Bash(rm:*)"]
