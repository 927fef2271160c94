"""The errors of delegate: one base, and a family for each party that can act on the error.

```
DelegateError
├── ToolError             for the model: a tool failed; the loop turns it into an error result
│                         the model reads and can act on. The run goes on.
├── ModelError            a provider call failed for good (after retries, or at its deadline);
│   │                     ends that agent with status "error", and only that agent.
│   ├── ModelOutputError  every attempt's answer was not whole: a cut stream, no finish reason,
│   │                     a body that is not the provider's protocol.
│   └── ContextOverflowError  the request was longer than the model's context window (`limit`,
│                         when the server said it); the loop cuts the conversation and asks again.
├── RunError              a run that ended without an answer, with its `run_id` and `status`:
│   │                     raised by `RunResult.raise_for_status()` (a run reports how it ended
│   │                     in `RunResult.status` and never raises on its own).
│   └── RunCancelled      the run was cancelled.
├── StoreError            the database cannot be reached or used, or holds a row delegate cannot
│   │                     read back (changed outside delegate, or corrupt).
│   ├── StoreBusyError    another process held its write lock past the wait; nothing was written.
│   └── BatchStoreError   a batch's row cannot be read back (`delegate.batch`).
├── UserError             misconfiguration or bad input; the message says how to fix it
│   │                     (a missing extra too: `require_extra`).
│   ├── WorkspaceError    a path leaves the workspace root (also a ToolError for the model).
│   ├── RunElsewhereError  a run's files are in a workspace folder this process cannot
│   │                     reach (its `host`, `path`): it is left to a process that can.
│   └── BatchNotFoundError, BatchStateError, BatchValidationError   (`delegate.batch`)
└── ApiError              an HTTP answer with an error status, a code and a message
    │                     (`delegate.server`; only the server raises it).
    └── BodyRefused       a request body past the server's cap, or one that stalled (413, 408).
```

Who acts on each: the model (`ToolError`), the provider's operator (`ModelError`), the caller of a
run (`RunError`), whoever runs the database (`StoreError`), the user (`UserError`), and an HTTP
client (`ApiError`).

The command line turns a `UserError` or a `StoreError` into one line on stderr and exit code 2
(`--debug` shows the traceback); a bug of delegate is the only traceback a user can meet.

Cancellation is never one of these: `asyncio.CancelledError` is a `BaseException` and passes
through every `except Exception` in the package.
"""

from __future__ import annotations


class DelegateError(Exception):
    """Base of every error raised by delegate."""


class ToolError(DelegateError):
    """A tool could not do what was asked. The message is shown to the model."""


class ModelError(DelegateError):
    """A model provider failed for good: bad credentials, or errors past the retries."""


class ModelOutputError(ModelError):
    """The model's server answered, but never with a whole answer: cut text never counts."""


class ContextOverflowError(ModelError):
    """The server refused the request as longer than the model's context window; `limit` is that
    window in tokens when the server said it."""

    def __init__(self, message: str, *, limit: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit


class RunError(DelegateError):
    """A run ended without an answer: `run_id` names it (`delegate runs show RUN_ID`), `status` is
    how it ended. Raised by `RunResult.raise_for_status()`."""

    def __init__(self, message: str, *, run_id: str, status: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.status = status


class RunCancelled(RunError):
    """The run was cancelled (by `Runtime.cancel`, `delegate runs cancel` or the HTTP API)."""


class StoreError(DelegateError):
    """The database cannot be reached or used, or holds a row delegate cannot read back."""


class StoreBusyError(StoreError):
    """Another process held the database's write lock for longer than the store waits; nothing was
    written. Try again in a moment (`retry_after` seconds is a fair guess)."""

    retry_after = 2

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "the store is busy: another process (a `delegate batch worker`, or a tool holding the "
            f"database open) holds its write lock{f' ({detail})' if detail else ''}; nothing was written, "
            "try again in a moment"
        )


class UserError(DelegateError):
    """Misconfiguration or bad input. The message says what to fix."""


class WorkspaceError(UserError, ToolError):
    """A path that leaves the workspace root, or cannot be used inside it."""


class RunElsewhereError(UserError):
    """A run works in a workspace folder that this process cannot reach (another folder, on this
    host or another: its id is not the run's): it is left to a process that can. `host` and `path`
    say where it is (None: not recorded); `note` says so without the path, for an HTTP user."""

    def __init__(self, message: str, *, run_id: str, host: str | None, path: str | None, note: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.host = host
        self.path = path
        self.note = note


def require_extra(module: str, extra: str, what: str) -> None:
    """Raise a `UserError` that names the extra to install when `module` is not installed: a lean
    `pip install delegate` has the CLI and the Python API on SQLite with OpenAI-compatible models,
    and the rest comes with extras. Looks the module up without importing it."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UserError(f"{what} needs the '{extra}' extra: pip install 'delegate[{extra}]'")
