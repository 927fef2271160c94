"""Commands are capped (issue 20, finding "commands have no resource caps"): one `bash` call
started 1,500 processes, held 3 GiB, wrote 1 GiB into /tmp and 2 GiB into the workspace. Each
test sets small caps, runs a command that tries to pass one (its loops bounded in count), and
checks that it is stopped with a result that says so, while the rest goes on."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from delegate import Store
from delegate._errors import ToolError, UserError
from delegate.tools import run_command
from delegate.tools._shell import CommandResult
from delegate.workspace import CommandPolicy, Workspace
from delegate.workspace._command_limits import MIB, CommandLimits
from delegate.workspace._sandbox import UNMEASURED, check_disk_quota, workspace_usage
from tests.security.support import two_users

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)")

SMALL = CommandLimits(
    processes=32,
    memory=256 * MIB,
    file_size=8 * MIB,
    open_files=64,
    cpu_seconds=1,
    tmp_size=4 * MIB,
    disk_quota=24 * MIB,
)


def capped(root: Path, limits: CommandLimits = SMALL) -> Workspace:
    return Workspace.open(root, allow_commands=True, commands=CommandPolicy(limits=limits))


def run(command: str, workspace: Workspace) -> CommandResult:
    return asyncio.run(run_command(command, workspace, timeout=120))


def test_a_fork_bomb_is_stopped_at_the_process_cap_and_says_so(tmp_path: Path) -> None:
    result = run("for i in $(seq 100); do sleep 30 > /dev/null 2>&1 & done; echo spawned", capped(tmp_path))
    assert "Cannot fork" in result.output or "Resource temporarily unavailable" in result.output, result.output
    assert any("process starts were refused" in n and "at most 32 processes" in n for n in result.notes), result


def test_a_big_allocation_fails_at_the_memory_cap(tmp_path: Path) -> None:
    result = run("python3 -c 'x = bytearray(512 * 1024 * 1024)' 2>&1 | tail -1; echo after", capped(tmp_path))
    assert result.output.splitlines() == ["MemoryError", "after"]


def test_tmp_is_sized_and_a_file_past_its_size_fails(tmp_path: Path) -> None:
    result = run("head -c 6M /dev/zero > /tmp/big; du -k /tmp/big | cut -f1", capped(tmp_path))
    assert "No space left on device" in result.output
    assert int(result.output.splitlines()[-1]) <= 4 * 1024


def test_a_file_past_the_file_size_cap_stops_its_writer(tmp_path: Path) -> None:
    result = run("head -c 12M /dev/zero > big.bin", capped(tmp_path))
    assert result.exit_code in (-25, 153)  # SIGXFSZ: the writer was stopped
    assert any("file size cap (8.0 MiB a file" in n for n in result.notes), result
    assert (tmp_path / "big.bin").stat().st_size == 8 * MIB


def test_opening_too_many_files_fails_at_the_open_files_cap(tmp_path: Path) -> None:
    opener = "import os\ntry:\n  [os.open('/dev/null', os.O_RDONLY) for _ in range(500)]\nexcept OSError as e: print(e)"
    result = run(f'python3 -c "{opener}"', capped(tmp_path))
    assert "Too many open files" in result.output


def test_a_cpu_spin_is_killed_at_the_cpu_cap_and_says_so(tmp_path: Path) -> None:
    result = run("python3 -c 'while True: pass'", capped(tmp_path))
    assert result.exit_code in (-24, 152, -9, 137), result  # SIGXCPU, or SIGKILL a second later
    assert not result.timed_out


def test_a_command_cannot_raise_its_own_caps(tmp_path: Path) -> None:
    result = run("ulimit -n 100000 2>&1; prlimit --pid $$ --nofile=100000:100000 2>&1; ulimit -n", capped(tmp_path))
    assert result.output.splitlines()[-1] == "64"
    assert "Operation not permitted" in result.output or "not permitted" in result.output.lower()


def test_a_command_that_fills_the_workspace_is_killed_past_its_disk_quota(tmp_path: Path) -> None:
    """Files each under the file size cap, many of them: the quota is watched while it runs."""
    workspace = capped(tmp_path)
    filling = "for i in $(seq 400); do head -c 1M /dev/zero > part$i.bin || exit 3; sleep 0.05; done"
    result = run(filling, workspace)
    assert result.over_quota and result.exit_code == -9, result
    assert any("grew past its disk quota of 24.0 MiB" in n for n in result.notes)
    assert workspace_usage(workspace) < 400 * MIB  # stopped long before its loop was done

    # at the quota, no file can grow until the agent makes room; removing files works
    full = run("head -c 10 /dev/zero > more.txt", workspace)
    assert full.exit_code in (-25, 153) and (tmp_path / "more.txt").stat().st_size == 0, full  # SIGXFSZ
    assert any("is at its disk quota" in n for n in full.notes)
    with pytest.raises(ToolError, match=r"past its disk quota of 24\.0 MiB"):
        check_disk_quota(workspace, 1)
    run("rm part*.bin", workspace)
    freed = run("echo kept > kept.txt; cat kept.txt", workspace)
    assert freed.output == "kept\n" and not freed.notes
    check_disk_quota(workspace, MIB)


def test_the_workspace_usage_leaves_out_what_agents_cannot_write(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "pack").write_bytes(b"x" * (2 * MIB))
    (tmp_path / ".delegate").mkdir()
    (tmp_path / ".delegate" / "delegate.db").write_bytes(b"x" * (2 * MIB))
    (tmp_path / "mine.bin").write_bytes(b"x" * MIB)
    os.link(tmp_path / "mine.bin", tmp_path / "again.bin")
    usage = workspace_usage(capped(tmp_path))
    assert MIB <= usage < 2 * MIB  # mine.bin once, the folders themselves; not .git nor .delegate


@contextmanager
def deep_tree(root: Path, depth: int, size: int) -> Iterator[None]:
    """`depth` folders one in the other under `root` (every other one with a sibling folder, so
    that each level still has a folder to walk when the walk goes down), `size` bytes at the
    bottom; removed afterwards a level at a time (`shutil.rmtree`, as pytest's clean-up, goes
    by recursion, too deep for it)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.mkdir("d", dir_fd=fd)
            if level % 2:
                os.mkdir("side", dir_fd=fd)
            deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        bottom = os.open("big.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(bottom, b"x" * size)
        os.close(bottom)
    finally:
        os.close(fd)
    try:
        yield
    finally:
        top, rest = root / "d", root / "rest"
        while top.exists():
            if (top / "d").exists():
                (top / "d").rename(rest)
            shutil.rmtree(top)
            if rest.exists():
                rest.rename(top)


@contextmanager
def handles_left(count: int) -> Iterator[None]:
    """Only `count` more files can be opened by this process while the block runs (the server's
    other threads and a walk share one table of open files)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held: list[int] = []
    try:
        while True:
            try:
                held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
        for fd in held[-count:]:
            os.close(fd)
        del held[-count:]
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_deep_tree_is_measured_whole_with_few_handles(tmp_path: Path) -> None:
    # The measure held a handle per level of the folder it walked: 1,500 levels took 1,500
    # handles, and past the process's limit (1,024 by default) the rest of the tree was
    # skipped, its files hidden from the quota, while the server's other threads could open
    # nothing.
    workspace = capped(tmp_path)
    with deep_tree(tmp_path, 1500, 8 * MIB), handles_left(100):
        usage = workspace_usage(workspace)
        assert 8 * MIB <= usage < 16 * MIB  # the file at the bottom (and the 2,250 folders, where they take blocks)
        with pytest.raises(ToolError, match="past its disk quota"):
            check_disk_quota(workspace, 20 * MIB)


def test_a_tree_that_cannot_be_measured_counts_as_over_the_quota(tmp_path: Path) -> None:
    with deep_tree(tmp_path, 200, MIB), handles_left(20):
        usage = workspace_usage(capped(tmp_path))
    assert usage == UNMEASURED  # not the part it could reach


def test_the_server_and_other_commands_go_on_while_one_passes_every_cap(tmp_path: Path, store: Store) -> None:
    """Through the real server: each hostile call is stopped with a result saying so, the run
    goes on to its end, a harmless command beside them runs, and so does the next user's."""
    workspace = (tmp_path / "server").resolve()
    workspace.mkdir()
    policy = CommandPolicy(limits=SMALL)
    with two_users(workspace, store, commands=policy) as users:
        outcomes = users.act(
            "alice",
            [
                ("bash", {"command": "for i in $(seq 100); do sleep 30 >/dev/null 2>&1 & done; echo x"}),
                ("bash", {"command": "python3 -c 'while True: pass'"}),
                ("bash", {"command": "head -c 12M /dev/zero > big.bin"}),
                ("bash", {"command": "echo still-here"}),
            ],
        )
        [bob] = users.act("bob", [("bash", {"command": "echo bob-here"})])
    forks, spin, big, plain = outcomes
    assert "process starts were refused: a command may have at most 32" in forks.content
    assert "stopped at its CPU time cap (1 s)" in spin.content
    assert "file size cap (8.0 MiB a file" in big.content
    assert plain.content.startswith("still-here") and not plain.error
    assert bob.content.startswith("bob-here")
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 64  # the test process kept its own limits


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["memory=1X"], "memory is a size in bytes"),
        (["speed=3"], "NAME one of processes, memory"),
        (["processes"], "write NAME=VALUE"),
        (["processes=2"], "processes must be at least 8"),
        (["cpu_seconds=0"], "cpu_seconds must be at least 1"),
    ],
)
def test_bad_command_limits_are_refused_saying_how_to_write_them(settings: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        CommandLimits().with_settings(settings)


def test_command_limits_are_read_with_units() -> None:
    limits = CommandLimits().with_settings(["memory=2G", "tmp-size=64M", "disk_quota=0", "processes=100"])
    assert (limits.memory, limits.tmp_size, limits.disk_quota, limits.processes) == (2 << 30, 64 << 20, 0, 100)
