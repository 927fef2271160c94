"""What one agent's command may use: processes, memory, file size, open files, CPU, `/tmp`, disk.

`CommandLimits` is part of the workspace's `CommandPolicy` (`workspace.commands.limits`); the
sandbox (`workspace/_sandbox.py`) applies it to every command, and the operator sets it with
`--command-limit NAME=VALUE` (sizes take `K`, `M`, `G`: `--command-limit memory=2G`):

- `processes`: processes (and threads) a command may have at once, counted over everything it
  starts (a pids cgroup where one can be made, else `RLIMIT_NPROC`, which binds only a server not
  run as root: see docs/security.md);
- `memory`: what a command holds in memory, all its processes together, its `/tmp` and `/dev/shm`
  among it (a memory cgroup where one can be made: past it the whole command is stopped), and the
  address space of each process (`RLIMIT_AS`: an allocation past it fails);
- `file_size`: the largest file a process may write (`RLIMIT_FSIZE`);
- `open_files`: file descriptors of each process (`RLIMIT_NOFILE`);
- `cpu_seconds`: CPU time of each process (`RLIMIT_CPU`), then it is killed (`SIGXCPU`);
- `tmp_size`: the size of the command's own `/tmp` (a tmpfs);
- `shm_size`: the size of its `/dev/shm` (a tmpfs: POSIX shared memory and semaphores);
- `disk_quota`: what the agents' part of the workspace may hold, in bytes (0: no quota). A
  command starts with its file size capped at what is left; one that grows the workspace past the
  quota is killed, and the file tools refuse a write past it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from .._errors import UserError

__all__ = ["CommandLimits"]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
_SIZE = re.compile(r"(?P<number>\d+)\s*(?P<unit>[KMGT]?)(?:i?B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": 1 << 40}
_SIZES = frozenset({"memory", "file_size", "tmp_size", "shm_size", "disk_quota"})


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandLimits:
    """The caps of each agent's command; the defaults are those of `delegate run` and `serve`."""

    processes: int = 512
    """Processes and threads one command may have at once."""
    memory: int = 4 * GIB
    """Bytes of memory a command holds, all its processes and its tmpfs together where a memory
    cgroup can be made, and of address space of each of its processes (4 GiB)."""
    file_size: int = 1 * GIB
    """Bytes of the largest file a command may write (1 GiB)."""
    open_files: int = 1024
    """Open file descriptors of each process."""
    cpu_seconds: int = 600
    """CPU seconds of each process."""
    tmp_size: int = 512 * MIB
    """Bytes a command's `/tmp` may hold (512 MiB)."""
    shm_size: int = 64 * MIB
    """Bytes a command's `/dev/shm` may hold (64 MiB, as a container's by default)."""
    disk_quota: int = 10 * GIB
    """Bytes the agents' part of a workspace may hold (10 GiB; 0: no quota)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"command limit {f.name} must be a whole number, not {value!r}")
            least = 0 if f.name == "disk_quota" else 1
            if value < least:
                raise UserError(f"command limit {f.name} must be at least {least}, not {value}")
        if self.processes < 8:
            raise UserError("command limit processes must be at least 8: the shell and the sandbox need a few")
        if self.memory < 64 * MIB:
            raise UserError("command limit memory must be at least 64M: the shell itself needs some")

    def with_settings(self, settings: list[str]) -> CommandLimits:
        """These limits with `NAME=VALUE` settings applied (the `--command-limit` flags).

        Raises `UserError` naming the known limits for an unknown name or a bad value.
        """
        known = {f.name: f for f in fields(self)}
        changes: dict[str, int] = {}
        for setting in settings:
            name, sep, value = setting.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                raise UserError(
                    f"--command-limit {setting!r}: write NAME=VALUE, NAME one of {', '.join(known)} "
                    "(sizes take K, M, G: memory=2G)"
                )
            changes[name] = _parse(name, value.strip(), setting)
        return replace(self, **changes)


def _parse(name: str, value: str, setting: str) -> int:
    if name in _SIZES:
        match = _SIZE.fullmatch(value)
        if match:
            return int(match["number"]) * _UNITS[match["unit"].upper()]
        raise UserError(f"--command-limit {setting!r}: {name} is a size in bytes, e.g. 512M or 2G")
    if value.isdigit():
        return int(value)
    raise UserError(f"--command-limit {setting!r}: {name} is a whole number")
