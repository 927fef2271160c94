"""The sandbox a workflow script runs in: Monty (`pydantic-monty`), a Python interpreter of its own
in a worker process, with no file system, network, clock, randomness or imports.

The script reaches the world only through the host functions delegate hands it
(`HOST_FUNCTIONS`): each call is one round trip, answered on the event loop by a `Host`. Every
other call that leaves the interpreter (an `import`, `open`, `time.time`, `os.urandom`, a name
nothing defines) is refused with an error that says what a script may do instead. Its own CPU
time, memory and recursion are capped inside the worker (`ScriptLimits`); its size before it
starts.

The sync pool runs in a thread, driven snapshot by snapshot: measured here, `AsyncMonty`'s pool
aborted the process at exit in 2 of 16 runs (exit status 134 after a clean result); the sync
pool in a thread in none of 10. One host round trip costs 160-470 µs (a `parallel()` of 1,000
calls is one of them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import UserError

if TYPE_CHECKING:
    from pydantic_monty import ExternalResult, MontyError, MontySession

__all__ = ["HOST_FUNCTIONS", "Host", "ScriptError", "ScriptFault", "ScriptLimits", "run_script"]

HOST_FUNCTIONS = frozenset(
    {"agent", "parallel", "phase", "log", "read", "glob", "_pipeline_open", "_pipeline_step", "_budget"}
)
"""The functions a script may call that the host answers (the prelude's `pipeline` and `call` are
sandbox code over `_pipeline_open` and `_pipeline_step`; reading `budget.<name>` asks `_budget`)."""

BUDGET_FIELDS = ("total", "spent", "remaining", "total_usd", "spent_usd", "remaining_usd", "agents_left")

PRELUDE = '''
def call(prompt, **options):
    """An agent call not made yet: what parallel() takes and a pipeline stage returns."""
    options["prompt"] = prompt
    return {"__agent_call__": options}


def _is_call(value):
    return isinstance(value, dict) and "__agent_call__" in value


def _asks(value):
    if _is_call(value):
        return True
    if isinstance(value, list) and len(value) > 0:
        for one in value:
            if not _is_call(one):
                return False
        return True
    return False


def _advance(values, i, stage, stages, out):
    while stage < len(stages):
        if values[i] is None:
            return
        asked = stages[stage](values[i])
        if _asks(asked):
            out.append([i, stage, asked])
            return
        values[i] = asked
        stage = stage + 1


def pipeline(items, *stages):
    """Each item through `stages` in turn, the items at once: a stage returns call(...) (or a
    list of them) to run agents on the item, or a value to pass on; a failed agent ends its item
    as None."""
    values = list(items)
    if len(stages) == 0 or len(values) == 0:
        return values
    run = _pipeline_open(len(values), len(stages))
    batch = []
    for i in range(len(values)):
        _advance(values, i, 0, stages, batch)
    outstanding = len(batch)
    while outstanding > 0:
        finished = _pipeline_step(run, batch)
        batch = []
        outstanding = outstanding - len(finished)
        for entry in finished:
            i = entry[0]
            values[i] = entry[2]
            before = len(batch)
            _advance(values, i, entry[1] + 1, stages, batch)
            outstanding = outstanding + len(batch) - before
    return values
'''

_REFUSED = (
    "a workflow script has no file system, network, clock, randomness or imports: {what} is not available "
    "(read workspace files with read() and glob(); pass data in through args)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptLimits:
    """What a workflow script may use of its own (its agents are bounded by the run's limits):
    `cpu_seconds` of execution (time spent waiting for agents does not count), `memory` bytes
    of heap, `recursion` levels of calls, `max_chars` of source."""

    cpu_seconds: float = 30.0
    memory: int = 256 * 1024 * 1024
    recursion: int = 200
    max_chars: int = 200_000


class ScriptFault(Exception):
    """What a host function raises inside the script: an exception of type `exc_type` (a Python
    built-in's name) with `message`, which the script may catch."""

    def __init__(self, exc_type: str, message: str) -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message


class ScriptError(Exception):
    """The script failed: an exception it did not catch, a limit it passed, or code that does
    not parse. `line` is the line of the script where it happened (None: not known)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message if line is None else f"line {line}: {message}")
        self.message = message
        self.line = line


class Host(Protocol):
    """What answers a script's calls, on the event loop: `call` returns the value the script gets,
    or raises `ScriptFault`; `print` gets what the script prints."""

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> Awaitable[Any]: ...

    def print(self, text: str) -> None: ...


async def run_script(script: str, host: Host, *, limits: ScriptLimits, inputs: dict[str, Any]) -> Any:
    """Run `script` to its end and return its value (its last expression), JSON-shaped. Raises
    `ScriptError` when the script fails. Cancelling this stops the script: each host call it
    makes from then on raises, and the worker is let go."""
    if len(script) > limits.max_chars:
        raise UserError(f"the workflow script has {len(script):,} characters; at most {limits.max_chars:,} are allowed")
    loop = asyncio.get_running_loop()
    driver = _Driver(script, host, loop, limits)
    work = asyncio.ensure_future(asyncio.to_thread(driver.run, inputs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        driver.stop()
        while not work.done():  # the thread ends at its next host call, or at its CPU limit
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                continue
            except Exception:
                break
        raise


class _Budget:
    """What `budget` is in the sandbox: each of its `BUDGET_FIELDS` is read from the host."""

    def __repr__(self) -> str:
        return "budget"


class _Driver:
    """Drives one script's Monty session, in a thread, snapshot by snapshot."""

    def __init__(self, script: str, host: Host, loop: asyncio.AbstractEventLoop, limits: ScriptLimits) -> None:
        self.script = script
        self.host = host
        self.loop = loop
        self.limits = limits
        self.stopped = threading.Event()
        self.pending: concurrent.futures.Future[Any] | None = None
        self._lock = threading.Lock()
        self.feed = "<python-input-1>"
        """The file name Monty gives the script's feed (the prelude's is another)."""

    def stop(self) -> None:
        self.stopped.set()
        with self._lock:
            if self.pending is not None:
                self.pending.cancel()

    def run(self, inputs: dict[str, Any]) -> Any:
        from pydantic_monty import Monty, MontyError

        grace = self.limits.cpu_seconds + 10
        try:
            with (
                Monty(min_processes=1, max_processes=1, request_timeout=grace) as pool,
                pool.checkout(
                    script_name="workflow.py",
                    limits={
                        "max_feed_duration_secs": self.limits.cpu_seconds,
                        "max_memory": self.limits.memory,
                        "max_recursion_depth": self.limits.recursion,
                        "max_suspensions": 10_000_000,  # ours to bound: `RunLimits.workflow_agents`
                    },
                    os_policy={"datetime": "call_host", "random_start": "call_host", "sleep": "call_host"},
                ) as session,
            ):
                session.feed_run(PRELUDE)
                return self._drive(session, inputs)
        except MontyError as exc:
            raise self._error(exc) from None

    def _drive(self, session: MontySession, inputs: dict[str, Any]) -> Any:
        from pydantic_monty import ClassInstance, FunctionSnapshot, MontyComplete, NameLookupSnapshot

        budget = ClassInstance(_Budget(), lazy_attrs=BUDGET_FIELDS)
        snapshot = session.feed_start(self.script, inputs={**inputs, "budget": budget}, print_callback=self._print)
        while not isinstance(snapshot, MontyComplete):
            if isinstance(snapshot, FunctionSnapshot):
                snapshot = snapshot.resume(self._answer(snapshot))
            elif isinstance(snapshot, NameLookupSnapshot) and snapshot.object_id is not None:
                answer = self._ask("_budget", (snapshot.variable_name,), {}, None)
                snapshot = snapshot.resume(value=answer.get("return_value"))
            elif isinstance(snapshot, NameLookupSnapshot):
                snapshot = snapshot.resume()  # a name nothing defines: NameError
            else:
                raise ScriptError("the script awaited something delegate does not run (asyncio): use parallel()")
        return _plain(snapshot.output)

    def _print(self, stream: str, text: str) -> None:
        del stream
        if text.strip():
            self.loop.call_soon_threadsafe(self.host.print, text.rstrip("\n"))

    def _answer(self, snapshot: Any) -> ExternalResult:
        name: str = snapshot.function_name
        if snapshot.is_os_function or name == "__import__":
            return {"exc_type": "PermissionError", "message": _REFUSED.format(what=_what(name, snapshot.args))}
        if name not in HOST_FUNCTIONS:
            return {"exc_type": "NameError", "message": f"name {name!r} is not defined"}
        if self.stopped.is_set():
            return {"exc_type": "KeyboardInterrupt", "message": "the workflow was stopped"}
        position = snapshot.position
        line = self.script.count("\n", 0, position.start) + 1 if position.filename == self.feed else None
        return self._ask(name, tuple(snapshot.args), dict(snapshot.kwargs), line)

    def _ask(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], line: int | None) -> ExternalResult:
        """One round trip: the host's answer to a call, as Monty takes it."""
        if self.stopped.is_set():
            return {"exc_type": "KeyboardInterrupt", "message": "the workflow was stopped"}
        ask = self.host.call(name, args, kwargs, line)
        future = asyncio.run_coroutine_threadsafe(_awaited(ask), self.loop)
        with self._lock:
            self.pending = future
        if self.stopped.is_set():
            future.cancel()
        try:
            return {"return_value": future.result()}
        except ScriptFault as fault:
            return {"exc_type": fault.exc_type, "message": fault.message}  # type: ignore[typeddict-item]
        except concurrent.futures.CancelledError:
            return {"exc_type": "KeyboardInterrupt", "message": "the workflow was stopped"}
        finally:
            with self._lock:
                self.pending = None

    def _error(self, exc: MontyError) -> ScriptError:
        from pydantic_monty import MontyCrashedError, MontyRuntimeError, MontySyntaxError

        if isinstance(exc, MontyRuntimeError | MontySyntaxError):
            frames = [f for f in exc.traceback() if f.filename == "workflow.py" or f.filename == self.feed]
            line = frames[-1].line if frames else None
            return ScriptError(exc.display("type-msg"), line)
        if isinstance(exc, MontyCrashedError):
            return ScriptError(f"the script's sandbox stopped: {exc}")
        return ScriptError(str(exc))


async def _awaited(ask: Awaitable[Any]) -> Any:
    return await ask


def _what(name: str, args: Any) -> str:
    if name == "import" or name == "__import__":
        module = args[0] if args else "?"
        return f"import of {module!r}"
    return f"{name}()"


def _plain(value: Any) -> Any:
    """A script's value as JSON holds it: tuples become lists, anything else not JSON its repr."""
    try:
        return json.loads(json.dumps(value, default=repr))
    except (TypeError, ValueError):
        return repr(value)
