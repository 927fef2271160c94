"""Search that cannot hang (issue 9, finding "the whole server frozen"): `grep` and `find_files`
patterns go through RE2 (linear time) in a search process with a deadline, off the event loop.
How fast `(a+)+$` answers is measured in `bench/search_regex.py`, not asserted here."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from delegate import Store, ToolError, Workspace
from delegate.workspace._search import SEARCH_NICENESS, search
from tests.security.support import two_users

CATASTROPHIC = "(a+)+$"

SEARCH_MODULE = b"delegate.workspace._search"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "server"
    root.mkdir()
    return root.resolve()


def test_a_catastrophic_pattern_answers_and_other_users_are_served(workspace: Path, store: Store) -> None:
    with two_users(workspace, store) as users:
        alice = users.folder("alice")
        alice.mkdir(parents=True)
        (alice / "line.txt").write_text("a" * 40 + "b\n" + "a" * 40 + "\n")
        (alice / ("a" * 40 + "b")).write_text("")
        outcomes = users.act(
            "alice",
            [
                ("grep", {"pattern": CATASTROPHIC, "path": "line.txt"}),
                ("grep", {"pattern": "(a|aa)*c", "path": "."}),
                ("find_files", {"pattern": "**/*a*a*a*a*a*a*a*a*a*a*c"}),
            ],
        )
        with users.api("bob") as bob:
            assert bob.get("/runs").status_code == 200
    assert [o.error for o in outcomes] == [False, False, False]
    assert outcomes[0].content == "line.txt:2: " + "a" * 40
    assert outcomes[1].content == "no lines match '(a|aa)*c' in ."
    assert outcomes[2].content.startswith("no files match")


def test_a_pattern_re2_cannot_run_is_refused_saying_why(workspace: Path, store: Store) -> None:
    with two_users(workspace, store) as users:
        [refused] = users.act("alice", [("grep", {"pattern": "(a)\\1"})])
    assert refused.error
    assert "RE2" in refused.content and "backreferences" in refused.content


async def test_a_search_past_its_deadline_is_stopped_and_the_next_one_answers(workspace: Path) -> None:
    (workspace / "x.txt").write_text("hello\n")
    view = Workspace.open(workspace)
    arguments = {"pattern": "hello", "path": ".", "glob": None, "ignore_case": False, "max_results": 10}
    with pytest.raises(ToolError, match="took longer than 0 s and was stopped"):
        await search(view, "grep", arguments, timeout=0)
    assert await search(view, "grep", arguments) == "x.txt:1: hello"


async def test_the_event_loop_runs_on_while_a_search_works(workspace: Path) -> None:
    for n in range(300):
        (workspace / f"f{n:03}.txt").write_text("a" * 40 + "\n")
    view = Workspace.open(workspace)
    ticks = 0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    arguments = {"pattern": CATASTROPHIC, "path": ".", "glob": None, "ignore_case": False, "max_results": 1000}
    found = await search(view, "grep", arguments)
    done.set()
    await ticker
    assert len(found.splitlines()) == 300
    assert ticks > 0


async def test_search_processes_run_at_a_lower_priority_than_the_process_they_serve(workspace: Path) -> None:
    (workspace / "x.txt").write_text("hello\n")
    arguments = {"pattern": "hello", "path": ".", "glob": None, "ignore_case": False, "max_results": 10}
    assert await search(Workspace.open(workspace), "grep", arguments) == "x.txt:1: hello"
    searchers = [
        pid for pid in _children() if b"delegate.workspace._search" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert searchers  # the idle search process is kept for the next search
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in searchers} == {min(19, ours + SEARCH_NICENESS)}


def _children() -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == os.getpid():
                found.append(int(stat.parent.name))
    return found


async def test_search_processes_get_no_provider_key_nor_database_url(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They inherited the server's whole environment: a search process, which reads the files agents
    # wrote and runs the patterns they chose, held the provider keys and the database's password.
    from delegate.workspace._search import _WORKERS, _end  # pyright: ignore[reportPrivateUsage]

    secrets = {"OPENAI_API_KEY": "sk-search-secret", "DELEGATE_DB": "postgresql://u:db-secret@h/db"}
    for name, value in {**secrets, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}.items():
        monkeypatch.setenv(name, value)
    with _WORKERS._lock:  # pyright: ignore[reportPrivateUsage]
        idle, _WORKERS._idle = _WORKERS._idle, []  # pyright: ignore[reportPrivateUsage]
    for worker in idle:  # started before the keys were set: a new one must start now
        _end(worker)
    (workspace / "x.txt").write_text("hello\n")
    arguments = {"pattern": "hello", "path": ".", "glob": None, "ignore_case": False, "max_results": 10}
    assert await search(Workspace.open(workspace), "grep", arguments) == "x.txt:1: hello"
    searchers = [
        pid for pid in _children() if b"delegate.workspace._search" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert searchers
    for pid in searchers:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert all(value.encode() not in environ for value in secrets.values()), environ
