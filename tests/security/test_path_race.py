"""The symlink-swap race, run for real: a process swaps a folder of the workspace with a symlink
that leads out of it (`renameat2(RENAME_EXCHANGE)`, as an agent with `bash` can), thousands of
times a second, while the file tools and `GET /api/v1/files` are used on paths through that
folder. A path found by name and then used by name again lands outside in the window between;
found from a handle on the root, it never does (`delegate.workspace._paths`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from delegate import Store, ToolContext, ToolError, Workspace
from delegate.tools import BUILTIN_TOOLS
from tests.security.support import two_users

ATTEMPTS = 5_000
SEARCH_ATTEMPTS = 300
"""Searches run in a child process and cost about a millisecond each: fewer, still racing."""

RACER = textwrap.dedent(
    """
    import ctypes, os, signal, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    os.chdir(sys.argv[1])
    deadline = time.monotonic() + float(sys.argv[2])  # bounded, whatever happens to the test
    swaps = 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    try:
        while time.monotonic() < deadline:
            if libc.renameat2(-100, b"a", -100, b"b", 2) == 0:  # AT_FDCWD, RENAME_EXCHANGE
                swaps += 1
    finally:
        print(swaps, flush=True)
    """
)


@contextmanager
def swapping(folder: Path, *, seconds: float = 300) -> Iterator[list[int]]:
    """`folder/a` and `folder/b` swapped in a loop by another process while the block runs; the
    list given holds, afterwards, how many swaps it made."""
    racer = subprocess.Popen(
        [sys.executable, "-c", RACER, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert racer.stdout is not None
    assert racer.stdout.readline().strip() == "ready"
    swaps: list[int] = []
    try:
        yield swaps
    finally:
        racer.terminate()
        out, _ = racer.communicate(timeout=60)
        swaps.append(int(out.split()[-1]))
    _settle(folder)


def _settle(folder: Path) -> None:
    """Leave `a` the real folder again (the racer may have stopped on either side)."""
    if (folder / "a").is_symlink():
        (folder / "a").rename(folder / "tmp-link")
        (folder / "b").rename(folder / "a")
        (folder / "tmp-link").rename(folder / "b")


def racing_workspace(root: Path, outside: Path) -> None:
    """`root/a/` a real folder, `root/b` a link to `outside`; both hold an `f.txt` of their own."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "f.txt").write_text("SECRET")
    (outside / "secret-name.txt").write_text("SECRET")
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("inside")
    (root / "b").symlink_to(outside.resolve())


async def tool(ctx: ToolContext, name: str, **arguments: Any) -> str | None:
    """What the tool answered, or None when it refused (a refusal is never an escape)."""
    try:
        return (await BUILTIN_TOOLS[name].run(ctx, arguments)).content
    except ToolError:
        return None


@pytest.fixture
def race(tmp_path: Path) -> tuple[Path, Path]:
    root = (tmp_path / "ws").resolve()
    outside = (tmp_path / "outside").resolve()
    racing_workspace(root, outside)
    return root, outside


async def test_reads_listings_and_writes_never_leave_the_workspace_while_a_folder_is_swapped(
    race: tuple[Path, Path],
) -> None:
    root, outside = race
    ctx = ToolContext(run_id="run", agent_id="agent", workspace=Workspace.open(root), emit=lambda e: None)
    escapes: list[str] = []
    inside = refused = 0
    with swapping(root) as swaps:
        for n in range(ATTEMPTS):
            read = await tool(ctx, "read_file", path="a/f.txt")
            listed = await tool(ctx, "list_dir", path="a")
            await tool(ctx, "write_file", path=f"a/w{n % 50}.txt", content="from the agent")
            await tool(ctx, "edit_file", path="a/f.txt", old_string="inside", new_string="inside")
            if read is None:
                refused += 1
            elif "inside" in read:
                inside += 1
            for answer in (read, listed):
                if answer is not None and ("SECRET" in answer or "secret-name" in answer):
                    escapes.append(answer)
    assert escapes == []
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt", "secret-name.txt"]  # nothing written there
    assert (outside / "f.txt").read_text() == "SECRET"
    assert swaps[0] > ATTEMPTS  # the race was live: the folder was swapped all along...
    assert inside > 0 and refused > 0  # ...and the tools met it both ways


async def test_searches_never_leave_the_workspace_while_a_folder_is_swapped(race: tuple[Path, Path]) -> None:
    root, _ = race
    ctx = ToolContext(run_id="run", agent_id="agent", workspace=Workspace.open(root), emit=lambda e: None)
    escapes: list[str] = []
    with swapping(root) as swaps:
        for _ in range(SEARCH_ATTEMPTS):
            for answer in (
                await tool(ctx, "grep", pattern="S.CRET|inside", path="a"),
                await tool(ctx, "grep", pattern="S.CRET", path="."),
                await tool(ctx, "find_files", pattern="**/*", path="a"),
            ):
                if answer is not None and ("SECRET" in answer or "secret-name" in answer):
                    escapes.append(answer)
    assert escapes == []
    assert swaps[0] > 0


def test_a_users_file_preview_never_serves_another_users_file_while_a_folder_is_swapped(tmp_path: Path) -> None:
    """On SQLite only: the store answers only who is asking, once a request, the same way on
    either backend (their contract suite says so); the race is the folder's. Run on both it cost
    10 s more of the suite for the same race."""
    workspace = tmp_path / "served"
    workspace.mkdir()
    with Store.open(f"sqlite:///{tmp_path / 'delegate.db'}") as store, two_users(workspace, store) as users:
        alice, bob = users.folder("alice"), users.folder("bob")
        bob.mkdir(parents=True, exist_ok=True)
        racing_workspace(alice, bob / "private")
        (bob / "private" / "f.txt").write_text("BOB'S SECRET")
        statuses: dict[int, int] = {}
        escapes = 0
        with users.api("alice") as api, swapping(alice) as swaps:
            for _ in range(ATTEMPTS):
                answer = api.get("/files", params={"path": "a/f.txt"})
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                escapes += "SECRET" in answer.text
    assert escapes == 0
    assert 500 not in statuses, statuses
    assert statuses.get(200, 0) > 0 and swaps[0] > ATTEMPTS  # served from her own folder, mid-race
    assert set(statuses) <= {200, 403, 404, 409}, statuses


def test_the_disk_quota_measure_never_leaves_the_workspace_while_a_folder_is_swapped(tmp_path: Path) -> None:
    # The measure walked folders by name: one swapped for a link after it was found to be a
    # folder was walked where the link led (the host's `/`, the server's store, another user's
    # folder), counting it against the user's quota and taking the server's time.
    from delegate.workspace._sandbox import workspace_usage  # pyright: ignore[reportPrivateUsage]

    root, outside = tmp_path / "ws", tmp_path / "outside"
    racing_workspace(root, outside)
    (outside / "big").write_bytes(b"x" * (4 << 20))
    workspace = Workspace.open(root)
    alone = workspace_usage(workspace)
    with swapping(root) as swaps:
        most = max(workspace_usage(workspace) for _ in range(ATTEMPTS // 5))
    assert swaps[0] > 0
    assert most < alone + (1 << 20), f"the measure counted {most - alone:,} bytes from outside the workspace"
