"""The `Store` class: one handle on the database (`_base.py`) with its queries: users and their
tokens (`_users.py`), a run's progress (`_progress.py`: events, checkpoints, subagent records),
and here the runs themselves: recorded, listed, leased, claimed, cancelled, stopped, and their
calls waiting for a person (`_approvals.py`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .._errors import StoreError, UserError
from .._lease import new_owner
from .._record import END_STATUSES, LIVE_STATUSES, Status
from .._text import safe_text
from .._time import iso, utc_now
from .._usage import Usage
from . import _approvals  # pyright: ignore[reportPrivateUsage]
from ._approvals import ApprovalRow, Decision
from ._db import insert_rows, select_rows
from ._listing import run_listing
from ._progress import Progress
from ._rows import RunRow, RunSummary, decode_run, json_text, run_values, usage_adapter
from ._schema import runs_table
from ._stops import ask_stop, check_agent_id, stop_requests
from ._threads import ThreadSummary, already_continued, continuable, latest_run, thread_rows, threads_of
from ._users import Users, hash_token, user_of_token

_FINISH_TEXT = (
    "UPDATE runs SET status = :status, final = :final, usage = :usage, error = :error, completed_at = :completed_at,"
    " stop_reason = :stop_reason, steps = :steps, result = :result, owner = NULL"
    " WHERE id = :run_id AND status IN ('running', 'interrupted')"
)
_FINISH = sa.text(_FINISH_TEXT)
"""How a run ends (`Store.finish_run`). Text, the same on both backends: an `update()` is compiled
once for each database a process opens (1 ms of each run in a new workspace)."""
_FINISH_OWNED = sa.text(_FINISH_TEXT + " AND owner = :owner")
"""The same, if `owner` still holds the run's lease."""


class Store(Users, Progress):
    """Users, runs, events and subagent records in one database. Thread-safe; build one per process."""

    # -- runs -------------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        prompt: str,
        model: str,
        user_id: str | None = None,
        workspace: str | None = None,
        workspace_host: str | None = None,
        workspace_id: str | None = None,
        run_id: str | None = None,
        owner: str | None = None,
        uploaded_files: list[dict[str, Any]] | None = None,
        limits: dict[str, Any] | None = None,
        gates: dict[str, Any] | None = None,
        warnings: Sequence[str] = (),
        previous_run_id: str | None = None,
        workflow: dict[str, Any] | None = None,
        eval_tag: dict[str, Any] | None = None,
    ) -> RunRow:
        """Record a new run, `running`, its lease held by `owner` (default: a new owner id of this
        process, see `delegate._lease`), who keeps it with `heartbeat`. `workspace`, `workspace_host`
        and `workspace_id` say where its files are (`delegate.workspace.Home`). `run_id` defaults to a fresh
        id; `uploaded_files`, `limits` (its `RunLimits.to_dict`), `gates` (its `Gates.stored`) and a
        `workflow` are kept for the run's resume; `warnings` are what was wrong as it started
        (`RunRow.warnings`); `eval_tag` says which evaluation attempt the run is (`RunRow.eval`).

        With `previous_run_id` the run continues that run (of `user_id`), in its thread: `UserError`
        if there is no such run, if it has not ended, or if another run continued it first (exactly
        one of several continues of one run wins; see `_threads.py`)."""
        now = utc_now()
        owner = owner or new_owner()
        new_id = run_id or uuid.uuid4().hex
        run = RunRow(
            id=new_id,
            user_id=user_id,
            prompt=safe_text(prompt),
            model=model,
            status="running",
            workspace=workspace,
            workspace_host=workspace_host,
            workspace_id=workspace_id,
            created_at=now,
            owner=owner,
            heartbeat_at=now,
            uploaded_files=uploaded_files,
            limits=limits,
            gates=gates,
            warnings=list(warnings),
            thread_id=new_id,
            previous_run_id=previous_run_id,
            workflow=workflow,
            eval=eval_tag,
        )
        try:
            with self.write() as conn:
                if previous_run_id is not None:
                    run.thread_id = continuable(conn, previous_run_id, user_id)
                values = run_values(run)  # not compiled for each database, as an `insert()` is: 2.1 -> 0.7 ms
                insert_rows(conn, runs_table, tuple(values), [tuple(values.values())])
        except IntegrityError:
            if previous_run_id is None:
                raise
            raise already_continued(self, previous_run_id, user_id) from None
        return run

    def finish_run(
        self,
        run_id: str,
        status: Status,
        final: str | None = None,
        usage: Usage | None = None,
        error: str | None = None,
        *,
        owner: str | None = None,
        stop_reason: str | None = None,
        steps: int = 0,
        result: Any = None,
    ) -> bool:
        """Record how a run ended (`result`: the lead's typed result as JSON data, if it has one).
        The first call wins: False if the run had already finished, or if `owner` is given and no
        longer holds the run's lease (another process took the run over).

        Raises `StoreError` for an unknown run.
        """
        if status not in END_STATUSES:
            raise ValueError(f"finish_run needs a final status, not {status!r}")
        with self.write() as conn:
            values = {
                "stop_reason": stop_reason,
                "steps": steps,
                "result": None if result is None else json_text(result),
            }
            return self._finish(conn, run_id, status, final, usage, error, owner, values)

    def _finish(
        self,
        conn: Connection,
        run_id: str,
        status: Status,
        final: str | None,
        usage: Usage | None,
        error: str | None,
        owner: str | None,
        extra: dict[str, Any],
    ) -> bool:
        values = {
            **extra,
            "status": status,
            "final": None if final is None else safe_text(final),
            "usage": usage_adapter.dump_json(usage or Usage()).decode(),
            "error": None if error is None else safe_text(error),
            "completed_at": iso(utc_now()),
            "run_id": run_id,
        }
        if owner is not None:
            values["owner"] = owner
        if conn.execute(_FINISH_OWNED if owner is not None else _FINISH, values).rowcount == 1:
            _approvals.close(conn, run_id, status)
            return True
        if conn.scalar(sa.select(runs_table.c.id).where(runs_table.c.id == run_id)) is None:
            raise StoreError(f"no run {run_id!r} in the store")
        return False

    def get_run(self, run_id: str, user_id: str | None = None) -> RunRow | None:
        """The run, or None if there is none, or if `user_id` is given and the run is another user's.
        A `running` run whose owner is gone reads `interrupted`."""
        query = sa.select(runs_table).where(runs_table.c.id == run_id)
        if user_id is not None:
            query = query.where(runs_table.c.user_id == user_id)
        with self.read() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else decode_run(row)

    def list_runs(
        self, user_id: str | None = None, *, limit: int = 50, offset: int = 0, status: Status | None = None
    ) -> list[RunRow]:
        """Runs, newest first: `user_id`'s own, or every run when it is None; only `status` ones if given."""
        query = sa.select(runs_table).order_by(runs_table.c.created_at.desc(), runs_table.c.id.desc())
        if user_id is not None:
            query = query.where(runs_table.c.user_id == user_id)
        live = status in ("running", "waiting", "interrupted")
        if status is not None:
            query = query.where(
                runs_table.c.status.in_(("running", "interrupted")) if live else runs_table.c.status == status
            )
        if not live:
            query = query.limit(limit).offset(offset)
        with self.read() as conn:
            seen: dict[str, bool] = {}
            runs = [decode_run(row, seen) for row in conn.execute(query).mappings()]
        if live:  # which of them is interrupted is decided on reading
            runs = [r for r in runs if r.status == status][offset : offset + limit]
        return runs

    def listing(self, *, limit: int = 50, offset: int = 0, status: Status | None = None) -> list[RunSummary]:
        """Every run, newest first, as a listing shows it (`delegate runs list`: the lines of `GET
        /runs`, subagent counts included), only `status` ones if given."""
        with self.read() as conn:
            return run_listing(conn, None, limit=limit, offset=offset, query=None, status=status)

    def run_summaries(
        self, token: str, *, limit: int = 50, offset: int = 0, query: str | None = None, status: Status | None = None
    ) -> list[RunSummary] | None:
        """The runs of the user holding `token`, newest first, as a listing shows them (see
        `RunSummary`, with how many subagents each ran and how many of those failed); only those
        whose prompt holds `query` (any case) and that read `status`, when given. None for an
        unknown or revoked token.

        The token is checked in the same call, on the same connection, as the listing (what
        `GET /runs` needs: one trip to the store a request), and never cached, so a token revoked
        by any process is refused from the next call on.
        """
        with self.read() as conn:
            found = select_rows(conn, user_of_token, {"token_hash": hash_token(token)})
            if not found:
                return None
            return run_listing(conn, found[0][0], limit=limit, offset=offset, query=query, status=status)

    def heartbeat(
        self, run_id: str, owner: str, usage: Usage | None = None
    ) -> tuple[bool, bool, dict[str, str | None]]:
        """Renew `owner`'s lease of a run (and store its usage so far); return `(held,
        cancel_requested, stop_requests)`: `stop_requests` are the subagents asked to stop from
        another process since the last beat (agent id to reason, see `request_stop`), taken.

        `held` is False when the run ended or another process took it over: stop working on it.
        """
        values: dict[str, Any] = {"heartbeat_at": iso(utc_now())}
        if usage is not None:
            values["usage"] = usage_adapter.dump_json(usage).decode()
        stops: dict[str, str | None] = {}
        runs = runs_table.c
        with self.write() as conn:
            update = runs_table.update().where(runs.id == run_id, runs.owner == owner, runs.status == "running")
            held = conn.execute(update.values(values)).rowcount == 1
            cancel = False
            if held:
                row = conn.execute(sa.select(runs.cancel_requested, runs.stop_requests).where(runs.id == run_id)).one()
                cancel = bool(row.cancel_requested)
                if row.stop_requests is not None:
                    stops = stop_requests(row.stop_requests)
                    conn.execute(runs_table.update().where(runs.id == run_id).values(stop_requests=None))
        return held, cancel, stops

    def request_stop(self, run_id: str, agent_id: str, reason: str | None = None, user_id: str | None = None) -> RunRow:
        """Ask the process running a run to stop one of its subagents (foreground or background),
        from any process: its owner stops it at its next heartbeat, and the lead gets its result
        (`cancelled`, stop reason `stopped`, `reason`). `UserError` if the run is unknown (or
        another user's), not running, or the subagent already ended or never started."""
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status not in LIVE_STATUSES:
            raise UserError(f"run {run_id} is {run.status}, not running: it has no subagent to stop")
        check_agent_id(run_id, agent_id)
        with self.write() as conn:
            ask_stop(conn, run_id, agent_id, reason)
        return run

    def release_run(self, run_id: str, owner: str, usage: Usage | None = None) -> bool:
        """Let go of `owner`'s lease of a running run (storing its usage so far), so that it reads
        `interrupted` at once, from any process, and can be resumed; False if `owner` did not hold it."""
        values: dict[str, Any] = {"owner": None}
        if usage is not None:
            values["usage"] = usage_adapter.dump_json(usage).decode()
        with self.write() as conn:
            update = runs_table.update().where(
                runs_table.c.id == run_id, runs_table.c.owner == owner, runs_table.c.status == "running"
            )
            return conn.execute(update.values(values)).rowcount == 1

    def claim_run(
        self,
        run_id: str,
        owner: str,
        user_id: str | None = None,
        *,
        warnings: Sequence[str] | None = None,
        at: tuple[str, str] | None = None,
    ) -> RunRow:
        """Take over an interrupted run for `owner`, to resume it; `UserError` if it cannot be resumed.
        `warnings` (if given) replace the run's: what was wrong as it started again. `at` (host,
        path) is where its folder is for `owner` (the same folder, its id checked by the caller).

        Exactly one of several processes claiming the same run at once wins. A run asked to cancel
        before its process died is cancelled instead; its subagents asked to stop stay asked.
        """
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status in LIVE_STATUSES:
            raise UserError(f"run {run_id} is still {run.status} (in process {run.owner}): it cannot be resumed")
        if run.status == "interrupted" and run.cancel_requested:  # asked before its process died
            run = self.request_cancel(run_id, user_id)
        if run.status != "interrupted":
            raise UserError(f"run {run_id} already ended ({run.status}): only an interrupted run can be resumed")
        values: dict[str, Any] = {"owner": owner, "heartbeat_at": iso(utc_now()), "status": "running"}
        if warnings is not None:
            run.warnings = list(warnings)
            values["warnings"] = run_values(run)["warnings"]
        if at is not None:
            run.workspace_host, run.workspace = at
            values["workspace_host"], values["workspace"] = at
        taken = [runs_table.c.id == run_id, runs_table.c.status == "running"]
        taken.append(runs_table.c.owner == run.owner if run.owner is not None else runs_table.c.owner.is_(None))
        with self.write() as conn:
            if conn.execute(runs_table.update().where(*taken).values(values)).rowcount != 1:
                raise UserError(f"run {run_id} was just taken over by another process")
            _approvals.reopen(conn, run_id)
        run.status, run.owner, run.cancel_requested, run.waiting = "running", owner, False, 0
        return run

    def note_run(self, run_id: str, note: str) -> bool:
        """Add `note` to the warnings of an interrupted run (once), saying why a process left it
        alone; False if it is not interrupted (it ended, or a process took it over meanwhile)."""
        run = self.get_run(run_id)
        if run is None or run.status != "interrupted":
            return False
        if note in run.warnings:
            return True
        held = runs_table.c.owner == run.owner if run.owner is not None else runs_table.c.owner.is_(None)
        noted = run_values(replace(run, warnings=[*run.warnings, note]))["warnings"]
        with self.write() as conn:
            update = runs_table.update().where(runs_table.c.id == run_id, runs_table.c.status == "running", held)
            return conn.execute(update.values(warnings=noted)).rowcount == 1

    def request_cancel(self, run_id: str, user_id: str | None = None) -> RunRow:
        """Cancel a run from any process: an interrupted run is recorded `cancelled` at once; a
        running one is asked to stop (its owner does so at its next heartbeat). `UserError` if it ended."""
        run = self.get_run(run_id, user_id)
        if run is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        if run.status == "interrupted":
            with self.write() as conn:
                where = [runs_table.c.id == run_id, runs_table.c.status == "running"]
                if run.owner is not None:
                    where.append(runs_table.c.owner == run.owner)
                ended = runs_table.update().where(*where)
                ended = ended.values(status="cancelled", owner=None, error="cancelled", completed_at=iso(utc_now()))
                if conn.execute(ended).rowcount == 1:
                    _approvals.close(conn, run_id, "cancelled")
        elif run.status in LIVE_STATUSES:
            with self.write() as conn:
                update = runs_table.update().where(runs_table.c.id == run_id, runs_table.c.status == "running")
                conn.execute(update.values(cancel_requested=1))
        else:
            raise UserError(f"run {run_id} already ended ({run.status}): nothing to cancel")
        found = self.get_run(run_id, user_id)
        assert found is not None
        return found

    def thread_runs(self, thread_id: str, user_id: str | None = None) -> list[RunRow]:
        """A thread's runs (`user_id`'s, when given), oldest first; empty for an unknown thread."""
        return thread_rows(self, thread_id, user_id)

    def list_threads(self, user_id: str | None = None, *, limit: int = 50, offset: int = 0) -> list[ThreadSummary]:
        """Threads (`user_id`'s, or all when None), the last continued first."""
        return threads_of(self, user_id, limit, offset)

    def latest_run(self, user_id: str | None = None, workspace: str | None = None) -> RunRow | None:
        """The newest run (`user_id`'s, of `workspace`, when given), or None."""
        return latest_run(self, user_id, workspace)

    def interrupted_runs(self, user_id: str | None = None) -> list[RunRow]:
        """Runs whose process is gone, oldest first: what a restarted server resumes."""
        return list(reversed(self.list_runs(user_id, status="interrupted", limit=10_000)))

    # -- approvals: calls waiting for a person (see `_approvals.py`) -----------------------------

    def request_approval(self, row: ApprovalRow) -> ApprovalRow:
        """Store a call that waits for a person; the stored one (and its decision) if it was already."""
        with self.write() as conn:
            return _approvals.request(conn, row)

    def decide_approval(
        self,
        run_id: str,
        call_id: str,
        decision: Decision,
        reason: str | None = None,
        user_id: str | None = None,
        *,
        always: bool = False,
    ) -> ApprovalRow:
        """Record a person's decision on a waiting call of `user_id`'s run (any run: None), the first
        standing; `always` approves its rule's later calls too. `UserError`: no such run or call."""
        if self.get_run(run_id, user_id) is None:
            raise UserError(f"no run {run_id!r}: list the runs with `delegate runs list`")
        with self.write() as conn:
            return _approvals.decide(conn, run_id, call_id, decision, reason, always)

    def approvals(self, run_id: str, *, pending: bool = False, under: str | None = None) -> list[ApprovalRow]:
        """A run's calls that waited for a person, in the order they asked (`pending`: only those
        waiting; `under`: only those of that call id or `<id>_...`)."""
        with self.read() as conn:
            return _approvals.listed(conn, run_id, pending=pending, under=under)

    def approval_decisions(self, run_id: str, call_ids: list[str]) -> list[ApprovalRow]:
        """Those of `call_ids` that have been decided (what a waiting run looks for at each beat)."""
        with self.read() as conn:
            return _approvals.decided(conn, run_id, call_ids) if call_ids else []
