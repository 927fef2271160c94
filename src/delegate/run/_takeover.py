"""Taking over interrupted runs: a run of `delegate serve` whose process died (a server of the same
database, on this machine or another) goes on in a process that is still up: another server, or
a `delegate batch worker`.

`Takeover` finds them (at start, then every half lease) and hands each to a `Resumer`: the
server's run manager (whose clients follow the run's events live), or `Takeover.here`'s, which
runs them as tasks of this process and interrupts them when it closes.

Runs stay with their files: a run whose workspace folder this process cannot reach (its id is
not the one of the folder it would run the run in, see `delegate.workspace.Home`) is left to a
process that can. The takeover says why, once: a warning in the log (with the paths, for the
operator) and a note in the run's warnings (without them, for its user: `GET /runs/{id}`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from .._errors import RunElsewhereError, UserError
from .._store import RUN_LEASE_TTL, Store
from ._home import check_home

if TYPE_CHECKING:
    from ._runtime import Runtime
    from ._settings import RuntimeFactory

_log = logging.getLogger("delegate.takeover")

CLOSE_WAIT = 10.0
"""How long `close` waits for the runs it interrupted to record that."""


class Resumer(Protocol):
    """Continues runs in this process: `live` holds the ids of those it runs now; `resume` raises
    `UserError` when a run cannot be taken (another process took it first, its model is gone);
    `close` interrupts them all, to be resumed again."""

    @property
    def live(self) -> Mapping[str, object]: ...

    async def resume(self, run_id: str, user_id: str) -> None: ...

    async def close(self) -> None: ...


class Takeover:
    """Resumes every interrupted run started by a server (oldest first) through `runs`."""

    def __init__(self, store: Store, runs: Resumer) -> None:
        self.store = store
        self.runs = runs
        self.left: dict[str, RunElsewhereError] = {}
        """The runs left to a process that reaches their files, and why (each said once)."""

    @classmethod
    def here(cls, store: Store, factory: RuntimeFactory) -> Takeover:
        """A takeover that runs what it takes as tasks of this process, each as its owner would
        on the server: with the run's own model, in its user's own workspace (`factory`)."""
        return cls(store, _Tasks(store, factory))

    async def take_over(self) -> list[str]:
        """Resume the interrupted runs of served users not running here; return their ids."""
        resumed: list[str] = []
        for run in await asyncio.to_thread(self.store.interrupted_runs):
            if run.user_id is None or run.id in self.runs.live or run.id in self.left:
                continue  # a run of `delegate run` is resumed with `delegate run --resume`
            try:
                await self.runs.resume(run.id, run.user_id)
            except RunElsewhereError as exc:
                await self._leave(exc)
                continue
            except UserError as exc:  # another process took it first, or its model is gone
                _log.info("not resuming run %s: %s", run.id, exc)
                continue
            resumed.append(run.id)
        return resumed

    async def _leave(self, exc: RunElsewhereError) -> None:
        """Leave a run whose files this process cannot reach, and say why: in the log, and in the
        run's warnings, where its user reads it."""
        self.left[exc.run_id] = exc
        _log.warning("not taking over run %s (its folder: %s on %s): %s", exc.run_id, exc.path, exc.host, exc)
        await asyncio.to_thread(self.store.note_run, exc.run_id, exc.note)

    async def watch(self) -> None:
        """`take_over` at start, then every half lease, until cancelled."""
        while True:
            try:
                await self.take_over()
            except Exception:  # the store being away for a moment must not end the watch
                _log.exception("taking over interrupted runs failed")
            await asyncio.sleep(RUN_LEASE_TTL / 2)

    async def close(self) -> None:
        """Interrupt the runs taken over, to be resumed again (what they did so far is stored)."""
        await self.runs.close()


class _Tasks:
    """Runs resumed as tasks of this process (a batch worker's: nobody follows them live here)."""

    def __init__(self, store: Store, factory: RuntimeFactory) -> None:
        self.store = store
        self.factory = factory
        self.live: dict[str, tuple[Runtime, asyncio.Task[None]]] = {}

    async def resume(self, run_id: str, user_id: str) -> None:
        run = await asyncio.to_thread(self.store.get_run, run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r} of user {user_id!r}")
        runtime = await asyncio.to_thread(self.factory, user_id, run.model)
        try:
            await asyncio.to_thread(check_home, run, runtime.workspace.root, served=True)
        except RunElsewhereError:
            await runtime.aclose()
            raise
        task = asyncio.create_task(self._drive(run_id, runtime), name=f"delegate-resume-{run_id}")
        self.live[run_id] = (runtime, task)

    async def _drive(self, run_id: str, runtime: Runtime) -> None:
        try:
            await runtime.resume(run_id)
        except UserError as exc:
            _log.info("not resuming run %s: %s", run_id, exc)
        except Exception:  # the runtime recorded how it ended; nothing here to tell
            _log.exception("run %s crashed", run_id)
        finally:
            await runtime.aclose()
            self.live.pop(run_id, None)

    async def close(self) -> None:
        tasks = [task for _, task in self.live.values()]
        for runtime, task in list(self.live.values()):
            if not runtime.interrupt():
                task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT)
