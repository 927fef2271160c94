"""Commands' memory is capped (issue 34, finding "RAM is not capped"): the sandbox's `/dev` was an
unsized tmpfs (12 GB here), so one command wrote 900 MiB into `/dev/shm` and 900 MiB into
`/dev/bigfile` while `/tmp` stopped at 512 MiB, and `memory` bound each process, so three children
held 2 GiB each at once. Each test runs the attack in the real sandbox."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from delegate.tools import run_command
from delegate.tools._shell import CommandResult
from delegate.workspace import CommandCgroup, CommandPolicy, Workspace
from delegate.workspace._command_limits import MIB, CommandLimits

pytestmark = pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="needs bubblewrap (/usr/bin/bwrap)")


def run(command: str, root: Path, limits: CommandLimits) -> CommandResult:
    workspace = Workspace.open(root, allow_commands=True, commands=CommandPolicy(limits=limits))
    return asyncio.run(run_command(command, workspace, timeout=120))


def test_no_tmpfs_of_the_sandbox_takes_900_mib_of_ram(tmp_path: Path) -> None:
    """`/dev/shm` holds `shm_size` (64 MiB by default), `/tmp` `tmp_size`; `/dev` itself and the
    sandbox's own root are read-only, so no write lands in a tmpfs without a size."""
    fills = {
        "shm": "/dev/shm/fill",
        "dev": "/dev/bigfile",
        "root": "/bigfile",
        "tmp": "/tmp/fill",
    }
    script = "; ".join(
        f"head -c 900M /dev/zero > {path} 2>/dev/null; echo {name}=$(( $(du -k {path} 2>/dev/null | cut -f1) + 0 ))"
        for name, path in fills.items()
    )
    result = run(f"{script}; rm -f /dev/shm/fill /tmp/fill", tmp_path, CommandLimits(disk_quota=0))
    held = dict(line.split("=") for line in result.output.splitlines() if "=" in line)
    assert set(held) == set(fills), result.output
    assert int(held["shm"]) <= 64 * 1024, result.output
    assert int(held["tmp"]) <= 512 * 1024, result.output
    assert held["dev"] == "0" and held["root"] == "0", result.output


def test_dev_shm_follows_its_own_cap(tmp_path: Path) -> None:
    result = run(
        "head -c 20M /dev/zero 2>&1 > /dev/shm/fill; du -k /dev/shm/fill | cut -f1",
        tmp_path,
        CommandLimits(shm_size=4 * MIB, disk_quota=0),
    )
    assert "No space left on device" in result.output
    assert int(result.output.splitlines()[-1]) <= 4 * 1024


HOG = """
for i in 1 2 3; do
  python3 -c 'import time; x = b"x" * (200 << 20); print("held", flush=True); time.sleep(4)' &
done
wait; echo done
"""


@pytest.mark.skipif(CommandCgroup.memory_capped() is False, reason="no memory cgroup can be made here")
def test_three_children_that_together_pass_the_memory_cap_are_stopped_as_a_whole(tmp_path: Path) -> None:
    """Each child holds 200 MiB, under the 256 MiB cap of a process; the three together pass the
    command's: the command is stopped, all of it, and its result says why."""
    result = run(HOG, tmp_path, CommandLimits(memory=256 * MIB, disk_quota=0))
    assert result.output.count("held") < 3, result.output
    assert "done" not in result.output, result.output  # the shell went with its children
    assert any("together passed the memory cap of 256.0 MiB" in note for note in result.notes), result


@pytest.mark.skipif(CommandCgroup.memory_capped() is False, reason="no memory cgroup can be made here")
def test_the_memory_cap_counts_what_a_command_keeps_in_its_tmpfs(tmp_path: Path) -> None:
    """What a command writes into `/tmp` is memory too: 200 MiB there and 200 MiB held by a process
    pass a cap of 256 MiB together."""
    result = run(
        'head -c 200M /dev/zero > /tmp/fill; python3 -c \'x = b"x" * (200 << 20); print("held")\'; echo done',
        tmp_path,
        CommandLimits(memory=256 * MIB, disk_quota=0),
    )
    assert "held" not in result.output, result.output
    assert any("together passed the memory cap" in note for note in result.notes), result
