"""Runs stay with their files (issue 34, item 7): a run records where its workspace is (host, path,
and the folder's id in its `.delegate/`), and a process whose folder is not that one (a second
server on the same store, `delegate run --resume` elsewhere) leaves it alone, saying why, instead
of running it without its files; the same folder at another path (shared storage mounted
elsewhere, a moved workspace) is the same folder."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

import httpx2
import pytest

from delegate import RunElsewhereError, Runtime, RuntimeSettings, Store
from delegate._record import END_STATUSES
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, reply
from delegate.workspace import HOST, Home, workspace_id
from tests.durable_support import FINAL_ANSWER, SUBAGENTS, cli_env, wait_for
from tests.loopback_openai import OpenAIServer
from tests.loopback_server import LiveServer
from tests.test_run_crashes import CHECKPOINTS, Processes
from tests.test_run_crashes import procs as procs  # the fixture


def _interrupted_run(store: Store, root: Path, user_id: str | None = None) -> str:
    """A run recorded as working in `root` whose process let it go: it reads `interrupted`."""
    home = Home.of(root.resolve())
    run = store.create_run(
        prompt="write the notes",
        model="m",
        user_id=user_id,
        workspace=home.path,
        workspace_host=home.host,
        workspace_id=home.id,
    )
    assert run.owner is not None and store.release_run(run.id, run.owner)
    return run.id


def _done() -> FunctionModel:
    return FunctionModel(lambda _: reply("done"))


def test_a_run_is_never_resumed_in_another_folder_than_its_own(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    with Store.open(f"sqlite:///{tmp_path / 'shared.db'}") as store:
        run_id = _interrupted_run(store, first)
        elsewhere = Runtime(model=_done(), workspace=second, store=store)
        with pytest.raises(RunElsewhereError, match=f"works in {first.resolve()} on {HOST}, not in {second.resolve()}"):
            asyncio.run(elsewhere.resume(run_id))
        assert store.get_run(run_id).status == "interrupted"  # type: ignore[union-attr]
        at_home = Runtime(model=_done(), workspace=first, store=store)
        assert asyncio.run(at_home.resume(run_id)).status == "completed"
    assert list(second.iterdir()) == [] or all(p.name == ".delegate" for p in second.iterdir())


def test_a_run_records_its_host_path_and_the_id_its_folder_keeps_out_of_the_agents_reach(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        result = Runtime(model=_done(), workspace=tmp_path / "ws", store=store).run_sync("say done")
        run = store.get_run(result.run_id)
    assert run is not None
    assert (run.workspace_host, run.workspace) == (HOST, str((tmp_path / "ws").resolve()))
    assert run.workspace_id == workspace_id(tmp_path / "ws") and len(run.workspace_id or "") == 32
    assert (tmp_path / "ws" / ".delegate" / "workspace-id").is_file()


def test_the_same_folder_at_another_path_resumes_the_run_there_and_records_where(tmp_path: Path) -> None:
    """Shared storage mounted at another path, or a workspace moved: the folder's id is the run's."""
    first = tmp_path / "a"
    (first / "notes").mkdir(parents=True)
    (first / "notes" / "done.md").write_text("a finished subagent's notes\n")
    with Store.open(f"sqlite:///{tmp_path / 'shared.db'}") as store:
        run_id = _interrupted_run(store, first)
        moved = shutil.move(first, tmp_path / "mounted-elsewhere")
        resumed = asyncio.run(Runtime(model=_done(), workspace=moved, store=store).resume(run_id))
        assert resumed.status == "completed"
        run = store.get_run(run_id)
        assert run is not None and run.workspace == str(Path(moved).resolve())
    assert (Path(moved) / "notes" / "done.md").read_text() == "a finished subagent's notes\n"


def test_a_folder_at_the_runs_path_but_with_another_id_is_another_folder(tmp_path: Path) -> None:
    """A folder made again at the same path (its `.delegate/` gone) does not hold the run's files."""
    first = tmp_path / "a"
    first.mkdir()
    with Store.open(f"sqlite:///{tmp_path / 'shared.db'}") as store:
        run_id = _interrupted_run(store, first)
        shutil.rmtree(first)
        first.mkdir()
        workspace_id(first, create=True)
        with pytest.raises(RunElsewhereError, match="its workspace id differs"):
            asyncio.run(Runtime(model=_done(), workspace=first, store=store).resume(run_id))


def test_files_of_a_run_another_servers_folder_holds_answer_where_they_are_without_a_path(
    tmp_path: Path,
) -> None:
    """`GET /files?run=` of a run whose folder this server cannot reach: 409 `elsewhere` with the
    host, never this server's file of the same name, no server path; its own runs' files read."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    with Store.open(f"sqlite:///{tmp_path / 'shared.db'}") as store:
        ada, token = store.add_user("ada")
        own = RuntimeSettings(workspace=here).user_root(ada)
        other = RuntimeSettings(workspace=there).user_root(ada)
        assert own is not None and other is not None
        for folder, text in ((own, "this server's file\n"), (other, "the other server's file\n")):
            folder.mkdir(parents=True)
            (folder / "notes.md").write_text(text)
        away, local = _interrupted_run(store, other, ada), _interrupted_run(store, own, ada)
        settings = ServerSettings(runtime=RuntimeSettings(workspace=here), model=lambda _: _done(), run_batches=False)
        headers = {"Authorization": f"Bearer {token}"}
        with (
            LiveServer(create_app(settings, store=store)) as server,
            httpx2.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=60) as api,
        ):
            refused = api.get("/files", params={"path": "notes.md", "run": away})
            read = api.get("/files", params={"path": "notes.md", "run": local})
            unknown = api.get("/files", params={"path": "notes.md", "run": "run_nobody"})
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert (error["code"], error["host"]) == ("elsewhere", HOST)
    assert f"files are in a workspace on {HOST}" in error["message"]
    assert str(tmp_path) not in refused.text and ada not in refused.text
    assert (read.status_code, read.json()["text"]) == (200, "this server's file\n")
    assert unknown.status_code == 404


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_second_server_leaves_a_killed_servers_run_to_a_server_of_its_folder_which_finds_its_files(
    procs: Processes, store_url: str, openai: OpenAIServer, tmp_path: Path
) -> None:
    """Two real `delegate serve` on one PostgreSQL store. A's run has its six subagents' notes
    written when A is SIGKILLed; B, in a folder of its own, does not take it over (its log and the
    run's warnings say why, `GET /files?run=` says where the files are) and writes nothing; a
    server of A's folder (the shared folder) takes it over, and the files are there."""
    folder_a, folder_b = tmp_path / "a", tmp_path / "b"
    folder_a.mkdir()
    folder_b.mkdir()
    env = cli_env(openai.base_url)
    with Store.open(store_url) as store:
        ada, token = store.add_user("ada")
        headers = {"Authorization": f"Bearer {token}"}
        a, url_a = procs.serve(store_url, env, folder_a, tmp_path / "a.log")
        FINAL_ANSWER.clear()  # the run holds before its last answer
        body = {"prompt": "write the notes", "max_parallel": 2}
        run_id = httpx2.post(f"{url_a}/api/v1/runs", json=body, headers=headers, timeout=30).json()["run_id"]
        wait_for(lambda: len(store.checkpoints(run_id)) >= CHECKPOINTS - 1, 120, "the run to reach its last answer")
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)

        b, url_b = procs.serve(store_url, env, folder_b, tmp_path / "b.log")
        noted = wait_for(
            lambda: any("not taken over by the server on" in w for w in store.get_run(run_id).warnings),  # type: ignore[union-attr]
            60,
            "server B to say why it left the run",
        )
        assert noted
        with httpx2.Client(base_url=f"{url_b}/api/v1", headers=headers, timeout=30) as api:
            shown = api.get(f"/runs/{run_id}").json()
            files = api.get("/files", params={"path": "notes/0.md", "run": run_id})
        assert shown["status"] == "interrupted"
        assert any(f"files are in a workspace on {HOST}" in w for w in shown["warnings"])
        assert files.status_code == 409 and files.json()["error"]["code"] == "elsewhere"
        assert str(tmp_path) not in files.text + str(shown["warnings"])
        assert "not taking over run " + run_id in (tmp_path / "b.log").read_text()
        own_b = folder_b / ".delegate" / "users" / ada
        assert not (own_b / "notes").exists() and not (own_b / "report.md").exists()

        c, url_c = procs.serve(store_url, env, folder_a, tmp_path / "c.log")  # A's folder: shared
        FINAL_ANSWER.set()
        ended = wait_for(lambda: (r := store.get_run(run_id)) is not None and r.status in END_STATUSES and r, 120)
        with httpx2.Client(base_url=f"{url_c}/api/v1", headers=headers, timeout=30) as api:
            note = api.get("/files", params={"path": "notes/5.md", "run": run_id})
        for proc in (b, c):
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
    assert ended.status == "completed", (tmp_path / "c.log").read_text()
    assert not ended.warnings  # the note went with the takeover
    assert (note.status_code, note.json()["text"]) == (200, "notes on topic 5\n")
    own_a = folder_a / ".delegate" / "users" / ada
    assert sorted(p.name for p in (own_a / "notes").iterdir()) == [f"{i}.md" for i in range(SUBAGENTS)]
    assert (own_a / "report.md").read_text() == "all notes written\n"
    assert not (own_b / "notes").exists()
