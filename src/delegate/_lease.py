"""Leases: who owns a piece of work, and whether that owner is still alive.

An owner id is `host:pid:token`. `host` names this machine and its process namespace, so a
process id is compared only with owners that share both. An owner is alive while it beats (its
heartbeat is younger than the lease's time to live); an owner on this machine whose process is
gone is dead at once, without waiting for its heartbeat to lapse.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from datetime import datetime

__all__ = ["RUN_HEARTBEAT", "RUN_LEASE_TTL", "host_identity", "new_owner", "owner_alive", "process_gone"]

RUN_LEASE_TTL = 10.0
"""Seconds a run's owner may go without a heartbeat before its run reads `interrupted`."""
RUN_HEARTBEAT = 1.0
"""How often the owner of a run beats (and looks for a cancellation asked from elsewhere)."""


@functools.cache
def host_identity() -> str:
    """This machine and process namespace: process ids compare only between owners that share it
    (read once: a process does not change either)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}:{namespace}"


def process_gone(pid: int) -> bool:
    """True when no process `pid` runs here: none at all, or a zombie (killed, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def new_owner() -> str:
    """A fresh owner id for this process: `host|pid|token`."""
    return f"{host_identity()}|{os.getpid()}|{uuid.uuid4().hex[:8]}"


def owner_alive(
    owner: str | None, heartbeat_at: datetime | None, now: datetime, ttl: float, seen: dict[str, bool] | None = None
) -> bool:
    """Whether the owner of a lease still holds it (see the module's docstring). `seen` keeps
    what was found of each owner's process while many leases are read at once (few owners)."""
    if not owner or heartbeat_at is None or (now - heartbeat_at).total_seconds() > ttl:
        return False  # a lapsed heartbeat says enough: no need to look for the process
    if seen is not None and owner in seen:
        return seen[owner]
    host, _, rest = owner.partition("|")
    pid, _, _ = rest.partition("|")
    alive = not (host == host_identity() and pid.isdigit() and process_gone(int(pid)))
    if seen is not None:
        seen[owner] = alive
    return alive
