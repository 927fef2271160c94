"""Threads: a run that continues an earlier one starts from that run's conversation.

What a continuing run's lead starts from is the conversation its previous run's lead ended with:
the lead's own messages and the results its tools gave it (a subagent's result as the `task` tool
gave it: a summary and file references), never a subagent's transcript. Each run stores that
conversation once, as it ends, in a checkpoint of kind `conversation` (one row: continuing a
thread of any length reads one row); it is the conversation as the loop had it, compacted when it
grew long, and the loop compacts and fits it again as it grows (see `delegate.loop`). A run with
no such checkpoint (it crashed outside the loop, or was stored before threads) is read as its
prompt and its answer (or how it ended), after its own previous run's conversation.

The thread's uploads are those of its runs together, each run keeping the whole list (so the last
run's list is the thread's). `Thread` is the Python face: `thread = runtime.thread()`, then
`await thread.send("...")` as often as needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import UserError
from .._messages import Message, TextPart, ToolResultPart, messages_adapter
from .._usage import Usage
from ..workspace import reaches

if TYPE_CHECKING:
    from .._store import RunRow, Store
    from ._recorder import Recorder
    from ._run_result import RunResult
    from ._runtime import Runtime

__all__ = [
    "CONVERSATION",
    "Thread",
    "continued",
    "conversation_of",
    "history_of",
    "keep_conversation",
    "open_thread",
    "thread_uploads",
]

CONVERSATION = "conversation"
"""The kind of the checkpoint holding the lead's conversation as its run ended (key `end`)."""
CUT_SHORT = "Error: the run ended before this call finished."


def keep_conversation(recorder: Recorder, messages: Sequence[Message], system: str) -> None:
    """Store the lead's conversation as its run ends, with its system prompt: what a run that
    continues it starts from, and what the web page shows each of its model calls was sent
    (`delegate.run._calls`). Turned into JSON on the recorder's thread, not here."""
    if recorder.store is not None and messages:
        recorder.checkpoint(CONVERSATION, "end", {"messages": answered(messages), "system": system})


def answered(messages: Sequence[Message]) -> list[Message]:
    """`messages` with each call answered: the calls of a turn that the run's end cut short (a
    cancel, a timeout) get a result saying so, since no model takes a call without its result."""
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant" or not last.tool_calls:
        return list(messages)
    results: list[Any] = [
        ToolResultPart(tool_call_id=c.id, name=c.name, content=CUT_SHORT, is_error=True) for c in last.tool_calls
    ]
    return [*messages, Message(role="tool", parts=results)]


def conversation_of(store: Store, run: RunRow) -> list[Message]:
    """The conversation a run continuing `run` starts from (see the module's docstring)."""
    data = store.checkpoint(run.id, CONVERSATION, "end")
    if data is not None:
        return messages_adapter().validate_python(data["messages"])
    before: list[Message] = []
    if run.previous_run_id is not None:
        previous = store.get_run(run.previous_run_id)
        before = conversation_of(store, previous) if previous is not None else []
    why = f": {run.error}" if run.error else ""
    answer = run.final or f"(This turn ended {run.status}{why}.)"
    return [*before, Message.user(run.prompt), Message(role="assistant", parts=[TextPart(text=answer)])]


def thread_uploads(
    earlier: list[dict[str, Any]] | None, now: list[dict[str, Any]] | None
) -> list[dict[str, Any]] | None:
    """The uploads of a thread's new run: those of the runs before, and those given now (one
    entry a file: a file uploaded again is the later entry)."""
    if earlier is None or now is None:
        return now if earlier is None else earlier
    merged = {_upload_key(e): e for e in earlier}
    for entry in now:
        merged.pop(_upload_key(entry), None)
        merged[_upload_key(entry)] = entry
    return list(merged.values())


def _upload_key(entry: dict[str, Any]) -> str:
    return str(entry.get("path") or entry.get("filename"))


def continued(runtime: Runtime, run_id: str) -> tuple[RunRow, list[Message]]:
    """The run a new run of `runtime` continues, and the conversation it starts from; `UserError`
    if that run cannot be continued (the store says it again, in the transaction that records the
    new run: see `Store.create_run`)."""
    from .._store import why_not_continuable

    store = _store_of(runtime)
    run = store.get_run(run_id, runtime.user_id)
    if run is None:
        raise UserError(f"no run {run_id!r} to continue: list the runs with `delegate runs list`")
    why = why_not_continuable(run)
    if why is not None:
        raise UserError(why)
    here = runtime.workspace.root
    if not reaches(here, run.workspace, run.workspace_id):  # another folder (its id is not the run's)
        if runtime.user_id is not None:  # a served user's: the folders are the servers', not theirs to see
            raise UserError(f"run {run_id} worked in another workspace than this server's: continue it there")
        raise UserError(
            f"run {run_id} worked in {run.workspace}, not {here}: continue it there "
            f"(--workspace {run.workspace}, or Runtime(workspace=...) in code)"
        )
    return run, conversation_of(store, run)


def history_of(store: Store, previous_run_id: str) -> list[Message]:
    """The conversation a resumed run of a thread started from: its previous run's."""
    previous = store.get_run(previous_run_id)
    return [] if previous is None else conversation_of(store, previous)


def open_thread(runtime: Runtime, continue_from: str | None) -> Thread:
    """`runtime.thread(continue_from)`: a new thread, or the stored thread of `continue_from`, its
    runs up to that one read back."""
    if continue_from is None:
        return Thread(runtime)
    from ._run_result import stored_result

    store = _store_of(runtime)
    run = store.get_run(continue_from, runtime.user_id)
    if run is None:
        raise UserError(f"no run {continue_from!r} to continue: list the runs with `delegate runs list`")
    rows = store.thread_runs(run.thread_id or run.id, runtime.user_id)
    upto = [r for r in rows if r.created_at <= run.created_at]
    return Thread(runtime, [r for r in (stored_result(store, r.id) for r in upto) if r is not None])


def _store_of(runtime: Runtime) -> Store:
    store = runtime.store
    if store is None:
        raise UserError("a thread needs the store its runs are kept in (store=False keeps nothing)")
    return store


class Thread:
    """A conversation with the lead, in Python: each `send` is a run that continues the last one.

    ```python
    thread = runtime.thread()             # or runtime.thread(RUN_ID): go on from a stored run
    first = await thread.send("Map the auth flow")
    second = await thread.send("Now fix the second point")   # its lead sees the first exchange
    thread.runs, thread.id, thread.usage
    ```

    It needs the runtime's store (where each run's conversation is kept).
    """

    def __init__(self, runtime: Runtime, runs: Sequence[RunResult] = ()) -> None:
        self.runtime = runtime
        self.runs: list[RunResult] = list(runs)
        """The thread's runs, oldest first (those read from the store when it was opened, then each `send`'s)."""

    @property
    def id(self) -> str | None:
        """The thread's id (its first run's), None before the first `send`."""
        return (self.runs[0].thread_id or self.runs[0].run_id) if self.runs else None

    @property
    def last_run_id(self) -> str | None:
        return self.runs[-1].run_id if self.runs else None

    @property
    def usage(self) -> Usage:
        """What all its runs spent, together (each run's own is `run.usage`)."""
        return sum((r.usage for r in self.runs), Usage())

    async def send(self, prompt: str, **kwargs: Any) -> RunResult:
        """Run the lead on `prompt`, continuing the thread's last run (the keywords of `Runtime.run`)."""
        result = await self.runtime.run(prompt, continue_from=self.last_run_id, **kwargs)
        self.runs.append(result)
        return result
