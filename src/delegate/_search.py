"""Searching the workspace: `find_files` and `grep`, run in a child process with a deadline.

Patterns (a grep regex, and the regex a glob becomes) are matched by RE2, whose time is linear in
the text: no pattern can backtrack for hours (`(a+)+$` answers at once). The walk and the match
run in a child process (`python -m delegate._search`) that the tool kills when its deadline
passes, so neither a huge tree nor a slow disk can hold an agent, or the server's event loop,
beyond it; the child runs at a lower priority (`SEARCH_NICENESS`), so searches cannot starve the
server of CPU either. The child gets the workspace's view (root, hidden folders, mounts) and resolves paths
through the same `Workspace.resolve` as every other tool; hidden folders and `.git` are not walked.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import stat
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO, Protocol, cast

from ._errors import ToolError, WorkspaceError
from ._workspace import Mount, Workspace

FIND_MAX_RESULTS = 500
GREP_LINE_MAX_CHARS = 500
GREP_MAX_FILE_BYTES = 16 * 1024 * 1024
SNIFF_BYTES = 8192
SEARCH_TIMEOUT = 30.0
"""Seconds a search may take before its process is killed."""
SEARCH_NICENESS = 10
"""How much lower than its parent's the search process's scheduling priority is: a search that
takes a whole core (many users' agents grepping at once) leaves the server's event loop the CPU it
needs to answer everyone else."""
SKIPPED_DIRS = frozenset({".git"})
"""Folders that walks step over besides the workspace's hidden ones: version control internals."""


class Regex(Protocol):
    """A compiled pattern (RE2's `_Regexp`): all the search needs of it."""

    def search(self, text: str) -> object | None: ...

    def fullmatch(self, text: str) -> object | None: ...


def compile_regex(pattern: str, *, ignore_case: bool = False, what: str = "regular expression") -> Regex:
    """`pattern` compiled by RE2; a `ToolError` that says what RE2 lacks when it cannot compile."""
    re2: Any = importlib.import_module("re2")  # google-re2 ships no type stubs
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        return cast(Regex, re2.compile(pattern, options))
    except re2.error as exc:
        detail: object = exc.args[0] if exc.args else exc
        reason = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        raise ToolError(
            f"invalid {what} {pattern!r}: {reason} (the engine is RE2: no backreferences or lookaround)"
        ) from None


async def search(workspace: Workspace, op: str, args: dict[str, Any], *, timeout: float = SEARCH_TIMEOUT) -> str:
    """Run `op` (`find` or `grep`) with `args` in a search process; kill it after `timeout` seconds.

    The waiting happens in a thread, so the event loop carries on whatever the search does.
    """
    import asyncio  # here, not at the top: the search process has no use for it (and it loads slowly)

    request = {"op": op, "args": args, "workspace": _view(workspace)}
    answer = await asyncio.to_thread(_WORKERS.ask, request, timeout)
    if "error" in answer:
        raise (WorkspaceError if answer.get("kind") == "workspace" else ToolError)(str(answer["error"]))
    return str(answer["text"])


class _Workers:
    """Search processes (`python -m delegate._search`), started on demand and kept while idle.

    Each answers one request at a time: a JSON line in, a JSON line out. A process that overruns
    its deadline is killed and forgotten; a few idle ones are kept, because starting Python costs
    about as much as a search. This is one pool per Python process (not per runtime) since the
    processes hold no state; after a fork the child starts its own, and all are ended at exit.
    """

    MAX_IDLE = 4

    def __init__(self) -> None:
        self._idle: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        atexit.register(self.close)

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        worker = self._take()
        assert worker.stdin is not None and worker.stdout is not None
        try:
            worker.stdin.write(json.dumps(request).encode() + b"\n")
            worker.stdin.flush()
            line = _read_line(worker.stdout, timeout)
        except BaseException:
            _end(worker)
            raise
        if line is None:
            _end(worker)
            raise ToolError(
                f"the search took longer than {timeout:g} s and was stopped; narrow the path, the glob or the pattern"
            )
        try:
            answer = cast(dict[str, Any], json.loads(line))
        except ValueError:
            _end(worker)
            raise ToolError("the search process failed; try again") from None
        self._give_back(worker)
        return answer

    def _take(self) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._pid != os.getpid():  # forked: those processes are our parent's
                self._idle, self._pid = [], os.getpid()
            while self._idle:
                worker = self._idle.pop()
                if worker.poll() is None:
                    return worker
                _end(worker)
        return subprocess.Popen(
            [sys.executable, "-m", "delegate._search"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl+C meant for us is not its to handle
        )

    def _give_back(self, worker: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if len(self._idle) < self.MAX_IDLE and self._pid == os.getpid():
                self._idle.append(worker)
                return
        _end(worker)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            _end(worker)


def _read_line(stream: IO[bytes], timeout: float) -> bytes | None:
    """One line from `stream`, or None when it did not come within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    fd = stream.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise ToolError("the search process ended without answering; try again")
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            return b"".join(chunks)


def _end(worker: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        worker.kill()
    with suppress(OSError):
        if worker.stdin is not None:
            worker.stdin.close()
        if worker.stdout is not None:
            worker.stdout.close()
    worker.wait()


_WORKERS = _Workers()


def _view(workspace: Workspace) -> dict[str, Any]:
    return {
        "root": str(workspace.root),
        "hidden": list(workspace.hidden),
        "read_only": list(workspace.read_only),
        "mounts": [[m.at, str(m.source)] for m in workspace.mounts],
    }


def _workspace_from(view: dict[str, Any]) -> Workspace:
    return Workspace(
        root=Path(view["root"]),
        hidden=tuple(view["hidden"]),
        read_only=tuple(view["read_only"]),
        mounts=tuple(Mount(at=at, source=Path(source)) for at, source in view["mounts"]),
    )


def _serve() -> None:
    """The search process: answer each request line on stdin with `{"text"}` or `{"error"}` on stdout."""
    os.nice(SEARCH_NICENESS)
    for line in sys.stdin.buffer:
        sys.stdout.write(json.dumps(_answer(json.loads(line))) + "\n")
        sys.stdout.flush()


def _answer(request: dict[str, Any]) -> dict[str, str]:
    workspace = _workspace_from(request["workspace"])
    args = request["args"]
    try:
        if request["op"] == "find":
            return {"text": find_files(workspace, args["pattern"], args["path"])}
        regex = compile_regex(args["pattern"], ignore_case=args["ignore_case"])
        return {"text": grep(workspace, regex, args["pattern"], args["path"], args["glob"], args["max_results"])}
    except WorkspaceError as exc:
        return {"error": str(exc), "kind": "workspace"}
    except ToolError as exc:
        return {"error": str(exc)}


# ---------------------------------------------------------------------------------------------
# find_files


def find_files(workspace: Workspace, pattern: str, path: str) -> str:
    if not pattern.strip():
        raise ToolError("pattern is empty; give a glob such as **/*.py")
    parts = PurePosixPath(pattern).parts
    fixed = 0
    while fixed < len(parts) and not _is_magic(parts[fixed]):
        fixed += 1
    base = workspace.resolve(Path(path, *parts[:fixed]))
    rest = parts[fixed:]
    if ".." in rest:
        raise ToolError("`..` may only come before the first wildcard of a pattern; or set `path` instead")
    if not rest:  # no wildcard at all: the pattern names one path
        matches = [_shown(workspace, base)] if base.exists() else []
        return _found_text(matches, pattern, path, capped=False, shallow=False)
    if not base.is_dir():
        return _found_text([], pattern, path, capped=False, shallow=False)
    matcher = _glob_regex(rest)
    max_depth = None if "**" in rest else len(rest)
    matches: list[str] = []
    for candidate, is_dir in _walk(workspace, base, max_depth):
        if matcher.fullmatch(candidate.relative_to(base).as_posix()):
            matches.append(workspace.relative(candidate) + ("/" if is_dir else ""))
    matches.sort()
    capped = len(matches) > FIND_MAX_RESULTS
    shallow = len(rest) == 1 and rest[0] != "**" and not matches
    return _found_text(matches, pattern, path, capped=capped, shallow=shallow)


def _found_text(matches: list[str], pattern: str, path: str, *, capped: bool, shallow: bool) -> str:
    where = "" if path in (".", "") else f" under {path}"
    if not matches:
        hint = f"; `{pattern}` searches one folder only, try `**/{pattern}` to search at any depth" if shallow else ""
        return f"no files match {pattern}{where}{hint}"
    if not capped:
        return "\n".join(matches)
    shown = "\n".join(matches[:FIND_MAX_RESULTS])
    return (
        f"{shown}\n[showed {FIND_MAX_RESULTS} of {len(matches):,} matches of {pattern}{where}; "
        "narrow the pattern or the path to see the rest]"
    )


def _shown(workspace: Workspace, path: Path) -> str:
    return workspace.relative(path) + ("/" if path.is_dir() and path != workspace.root else "")


def _walk(workspace: Workspace, base: Path, max_depth: int | None = None) -> Iterator[tuple[Path, bool]]:
    """Every entry under `base` as (path, is_folder), in a stable order, without leaving the root.

    Symlinked folders are not entered (no loops, no duplicates); a symlink is yielded only when it
    resolves inside the view. `.git` and the view's hidden folders are stepped over. `max_depth`
    counts path segments below `base`.
    """
    for folder, dirnames, filenames in os.walk(base):
        depth = len(Path(folder).relative_to(base).parts)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and not workspace.is_hidden(Path(folder, d)))
        entries = [(d, True) for d in dirnames] + [(f, False) for f in sorted(filenames)]
        if max_depth is not None and depth + 1 >= max_depth:
            dirnames[:] = []  # deeper entries could not match
        for name, is_dir in entries:
            candidate = Path(folder, name)
            if candidate.is_symlink():
                try:
                    target = workspace.resolve(workspace.relative(candidate))
                except WorkspaceError:
                    continue
                is_dir = target.is_dir()
            yield candidate, is_dir


def _is_magic(segment: str) -> bool:
    return any(c in segment for c in "*?[{")


def _glob_regex(segments: tuple[str, ...] | list[str]) -> Regex:
    """A regex for a `/`-separated glob where `**` spans folders and `*` stays within one segment."""
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment_regex(segment) + ("" if last else "/"))
    return compile_regex("(?s)" + "".join(out), what="glob pattern")


def _escape(char: str) -> str:
    """`char` as a literal in an RE2 pattern (RE2 takes a backslash before any ASCII punctuation)."""
    return "\\" + char if char in string.punctuation else char


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        i += 1
        if c == "*":
            if not out or out[-1] != "[^/]*":
                out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := _class_end(segment, i)) > 0:
            body = segment[i:end]
            negate = body[:1] in ("!", "^")
            body = "".join(c if c == "-" else _escape(c) for c in (body[1:] if negate else body))
            out.append("[" + ("^/" if negate else "") + body.replace("--", "-\\-") + "]")
            i = end + 1
        elif c == "{" and (end := _brace_end(segment, i)) > 0:
            options = _split_top_level(segment[i:end])
            out.append("(?:" + "|".join(_segment_regex(o) for o in options) + ")")
            i = end + 1
        else:
            out.append(_escape(c))
    return "".join(out)


def _class_end(segment: str, start: int) -> int:
    """Index of the `]` closing a class opened just before `start`, or -1 (then `[` is literal)."""
    i = start + 1 if segment[start : start + 1] in ("!", "^") else start
    if segment[i : i + 1] == "]":
        i += 1  # a `]` first in the class is a member
    end = segment.find("]", i)
    return end


def _brace_end(segment: str, start: int) -> int:
    depth = 1
    for i in range(start, len(segment)):
        if segment[i] == "{":
            depth += 1
        elif segment[i] == "}":
            depth -= 1
            if depth == 0:
                return i if "," in segment[start:i] else -1
    return -1


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for c in text:
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (c == "{") - (c == "}")
        current += c
    return [*parts, current]


# ---------------------------------------------------------------------------------------------
# grep


@dataclass(kw_only=True, slots=True)
class _GrepOutcome:
    lines: list[str]
    too_big: list[str]
    capped: bool = False


def grep(workspace: Workspace, regex: Regex, pattern: str, path: str, glob: str | None, max_results: int) -> str:
    base = workspace.resolve(path)
    rel = workspace.relative(base)
    if not base.exists():
        raise ToolError(f"no such file or folder: {rel}")
    outcome = _GrepOutcome(lines=[], too_big=[])
    for file in _grep_files(workspace, base, glob):
        _grep_file(workspace, file, regex, max_results, outcome)
        if outcome.capped:
            break
    text = "\n".join(outcome.lines) if outcome.lines else f"no lines match {pattern!r} in {rel}"
    if outcome.capped:
        text += (
            f"\n[stopped at {max_results} matching lines; narrow the pattern, path or glob, "
            "or raise max_results (up to 1000)]"
        )
    if outcome.too_big:
        names = ", ".join(outcome.too_big[:5]) + (", ..." if len(outcome.too_big) > 5 else "")
        text += f"\n[not searched, over {GREP_MAX_FILE_BYTES // (1024 * 1024)} MiB: {names}]"
    return text


def _grep_files(workspace: Workspace, base: Path, glob: str | None) -> Iterator[Path]:
    if not base.is_dir():
        yield base
        return
    matcher = _glob_regex(PurePosixPath(glob).parts) if glob else None
    by_name = glob is not None and "/" not in glob
    files: list[tuple[str, Path]] = []
    for candidate, is_dir in _walk(workspace, base):
        if is_dir:
            continue
        rel = candidate.relative_to(base).as_posix()
        if matcher is None or matcher.fullmatch(candidate.name if by_name else rel):
            files.append((rel, candidate))
    files.sort()  # path order, as find_files answers, rather than the walk's folder-by-folder order
    yield from (path for _, path in files)


def _grep_file(workspace: Workspace, file: Path, regex: Regex, max_results: int, outcome: _GrepOutcome) -> None:
    real = workspace.resolve(workspace.relative(file)) if file.is_symlink() else file  # read at its target
    rel = workspace.relative(file)
    try:
        with open_for_reading(real, rel) as f:
            if os.fstat(f.fileno()).st_size > GREP_MAX_FILE_BYTES:
                outcome.too_big.append(rel)
                return
            raw = f.read()
    except (ToolError, OSError):
        return  # unreadable files are skipped, as grep -s does
    if looks_binary(raw[:SNIFF_BYTES]):
        return
    for number, line in enumerate(raw.decode("utf-8", "replace").split("\n"), 1):
        line = line.rstrip("\r")
        if regex.search(line):
            if len(outcome.lines) >= max_results:
                outcome.capped = True
                return
            shown = line if len(line) <= GREP_LINE_MAX_CHARS else line[:GREP_LINE_MAX_CHARS] + "…"
            outcome.lines.append(f"{rel}:{number}: {shown}")


def open_for_reading(real: Path, rel: str) -> BinaryIO:
    """Open a resolved regular file for reading.

    `O_NOFOLLOW` refuses a symlink put in its place since it was resolved; `O_NONBLOCK` keeps a
    named pipe from blocking the open forever (it is then refused, as are devices and sockets).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise ToolError(f"cannot read {rel}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolError(f"{rel} is not a regular file (a pipe, socket or device); it cannot be read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first few KiB marks a file binary, as git and grep decide."""
    return b"\x00" in head


if __name__ == "__main__":
    _serve()
