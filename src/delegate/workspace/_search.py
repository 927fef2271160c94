"""Searching the workspace: `find_files` and `grep`, run in a child process with a deadline.

Patterns (a grep regex, and the regex a glob becomes) are matched by RE2, whose time is linear in
the text: no pattern can backtrack for hours (`(a+)+$` answers at once). The walk and the match
run in a child process (`python -m delegate.workspace._search`) that the tool kills when its deadline
passes, so neither a huge tree nor a slow disk can hold an agent, or the server's event loop,
beyond it; the child runs at a lower priority (`SEARCH_NICENESS`), so searches cannot starve the
server of CPU either. The child gets the workspace's view (root, hidden folders, mounts), finds
paths through the same `Workspace.locate` as every other tool and walks folders by their handles
(`scandir` of a folder's descriptor, each subfolder opened from its parent's with `O_NOFOLLOW`),
so a folder swapped for a symlink mid-walk is never entered; hidden folders and `.git` are not
walked. Names and lines that are not UTF-8 are matched and shown with `\\xNN` escapes.
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

from .._errors import ToolError, WorkspaceError
from .._text import safe_text
from ._layer import Layer
from ._root import Located, Mount, Workspace

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
SEARCH_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
"""What a search process gets of our environment: what Python needs to start and import us, never
the provider keys and database URLs (it reads files agents wrote and runs patterns they chose)."""


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
    """Search processes (`python -m delegate.workspace._search`), started on demand and kept while idle.

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
            [sys.executable, "-m", "delegate.workspace._search"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl+C meant for us is not its to handle
            env={name: os.environ[name] for name in SEARCH_ENV if name in os.environ},
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
        "layer": None if workspace.layer is None else [workspace.layer.run_id, workspace.layer.agent_id],
    }


def _workspace_from(view: dict[str, Any]) -> Workspace:
    root = Path(view["root"])
    layer = view.get("layer")
    return Workspace(
        root=root,
        hidden=tuple(view["hidden"]),
        read_only=tuple(view["read_only"]),
        mounts=tuple(Mount(at=at, source=Path(source)) for at, source in view["mounts"]),
        layer=None if layer is None else Layer(root=root, run_id=layer[0], agent_id=layer[1], track=False),
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
            return {"text": safe_text(find_files(workspace, args["pattern"], args["path"]))}
        regex = compile_regex(args["pattern"], ignore_case=args["ignore_case"])
        return {
            "text": safe_text(grep(workspace, regex, args["pattern"], args["path"], args["glob"], args["max_results"]))
        }
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
    rest = parts[fixed:]
    if ".." in rest:
        raise ToolError("`..` may only come before the first wildcard of a pattern; or set `path` instead")
    with workspace.locate(Path(path, *parts[:fixed])) as base:
        if not rest:  # no wildcard at all: the pattern names one path
            matches = [_shown(base)] if base.info is not None else []
            return _found_text(matches, pattern, path, capped=False, shallow=False)
        if not base.is_dir():
            return _found_text([], pattern, path, capped=False, shallow=False)
        matcher = _glob_regex(rest)
        max_depth = None if "**" in rest else len(rest)
        matches: list[str] = []
        for entry in _walk(workspace, base, max_depth):
            if matcher.fullmatch(safe_text(entry.below)):
                matches.append(entry.rel + ("/" if entry.is_dir else ""))
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


def _shown(at: Located) -> str:
    return at.rel + ("/" if at.is_dir() and at.rel != "." else "")


@dataclass(frozen=True, slots=True)
class _Entry:
    """One entry met by `_walk`: its view path `rel`, its path `below` the walk's base, whether it
    is (or its link leads to) a folder, and the handle of the folder it is in with its `name`
    there (valid until the walk moves on). `link` is True for a symlink that leads inside."""

    rel: str
    below: str
    is_dir: bool
    folder: int
    name: str
    link: bool = False


_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(slots=True)
class _Level:
    """A folder `_walk` is in: its handle, its view path, its path below the base, and the
    subfolders it has still to enter."""

    fd: int
    rel: str
    below: str
    pending: list[str]


def _walk(workspace: Workspace, base: Located, max_depth: int | None = None) -> Iterator[_Entry]:
    """Every entry under the folder `base`, in a stable order, without leaving the view.

    Folders are read by handle: the base's from its `Located`, each subfolder opened from its
    parent's with `O_NOFOLLOW`, so no swap can lead the walk elsewhere; one handle is open per
    level. Symlinked folders are not entered (no loops, no duplicates); a symlink is yielded only
    when it resolves inside the view. `.git` and the view's hidden folders are stepped over
    (inside a mount, whose view path lies in a hidden folder, nothing is). `max_depth` counts
    path segments below `base`.
    """
    if workspace.layer is not None:
        yield from _walk_layered(workspace, base.rel, max_depth)
        return
    in_mount = workspace.hides(base.rel)
    try:
        top = base.open(_OPEN_FOLDER)
    except OSError:
        return
    stack = [_Level(top, base.rel, "", [])]
    try:
        yield from _entries(workspace, stack[-1], max_depth, in_mount)
        while stack:
            level = stack[-1]
            if not level.pending:
                os.close(stack.pop().fd)
                continue
            name = level.pending.pop(0)
            try:
                sub = os.open(name, _OPEN_FOLDER, dir_fd=level.fd)
            except OSError:
                continue
            stack.append(_Level(sub, _joined(level.rel, name), _joined(level.below, name), []))
            yield from _entries(workspace, stack[-1], max_depth, in_mount)
    finally:
        for level in stack:
            os.close(level.fd)


def _entries(workspace: Workspace, level: _Level, max_depth: int | None, in_mount: bool) -> Iterator[_Entry]:
    """The entries of the open folder of `level` (folders first, then the rest, each sorted by
    name); the folders to walk into next are put in its `pending`."""
    try:
        with os.scandir(level.fd) as found:
            listed = sorted(found, key=lambda e: e.name)
    except OSError:
        return
    folders: list[os.DirEntry[str]] = []
    others: list[os.DirEntry[str]] = []
    for entry in listed:
        try:
            is_folder = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if not is_folder:
            others.append(entry)
        elif entry.name not in SKIPPED_DIRS and (in_mount or not workspace.hides(_joined(level.rel, entry.name))):
            folders.append(entry)
    depth = level.below.count("/") + 1 if level.below else 0
    if max_depth is None or depth + 1 < max_depth:
        level.pending.extend(e.name for e in folders)
    for entry in folders:
        rel, below = _joined(level.rel, entry.name), _joined(level.below, entry.name)
        yield _Entry(rel=rel, below=below, is_dir=True, folder=level.fd, name=entry.name)
    for entry in others:
        rel, below = _joined(level.rel, entry.name), _joined(level.below, entry.name)
        is_dir = False
        link = entry.is_symlink()
        if link:
            try:
                with workspace.locate(rel) as target:
                    if target.info is None:
                        continue
                    is_dir = target.is_dir()
            except WorkspaceError:
                continue
        yield _Entry(rel=rel, below=below, is_dir=is_dir, folder=level.fd, name=entry.name, link=link)


def _walk_layered(workspace: Workspace, top: str, max_depth: int | None) -> Iterator[_Entry]:
    """`_walk` for an overlay subagent: each folder's names are the workspace's with its layer's
    over them (`Layer.listing`), and each entry is found through the layered view, so it is the
    subagent's own version where it has one. Folders met through a symlink are not entered."""
    assert workspace.layer is not None
    layer, shared = workspace.layer, workspace.shared
    pending = [(top, "")]
    while pending:
        rel, below = pending.pop(0)
        theirs: list[str] = []
        with suppress(WorkspaceError), shared.locate(rel) as low:
            if low.is_dir():
                with suppress(OSError):
                    fd = low.open(os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        theirs = os.listdir(fd)
                    finally:
                        os.close(fd)
        depth = below.count("/") + 1 if below else 0
        for name in layer.listing(rel, theirs):
            path, under = _joined(rel, name), _joined(below, name)
            if workspace.hides(path):
                continue
            try:
                at = workspace.locate(path)
            except WorkspaceError:
                continue
            with at:
                if at.info is None:
                    continue
                is_dir = at.is_dir()
                if is_dir and (name in SKIPPED_DIRS or at.followed):
                    if at.followed:
                        yield _Entry(rel=path, below=under, is_dir=True, folder=at.folder, name=at.name, link=True)
                    continue
                if is_dir and (max_depth is None or depth + 1 < max_depth):
                    pending.append((path, under))
                yield _Entry(rel=path, below=under, is_dir=is_dir, folder=at.folder, name=at.name, link=at.followed)


def _joined(rel: str, name: str) -> str:
    return name if rel in (".", "") else f"{rel}/{name}"


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
    outcome = _GrepOutcome(lines=[], too_big=[])
    with workspace.locate(path) as base:
        rel = base.rel
        if base.info is None:
            raise ToolError(f"no such file or folder: {rel}")
        if base.is_dir():
            _grep_folder(workspace, base, glob, regex, max_results, outcome)
        else:
            raw = _read_for_grep(base.folder, base.name, rel, outcome)
            if raw is not None:
                _grep_text(raw, rel, regex, max_results, outcome)
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


def _grep_folder(
    workspace: Workspace, base: Located, glob: str | None, regex: Regex, max_results: int, outcome: _GrepOutcome
) -> None:
    """Grep each file under `base` that `glob` admits, answering in path order (as find_files
    does) although the walk meets them folder by folder: each file is read from its folder's
    handle as the walk meets it (a link at its target, found afresh), its lines kept by path."""
    matcher = _glob_regex(PurePosixPath(glob).parts) if glob else None
    by_name = glob is not None and "/" not in glob
    found: list[tuple[str, list[str], list[str]]] = []  # path, matching lines, too big
    for entry in _walk(workspace, base):
        if entry.is_dir or not (
            matcher is None or matcher.fullmatch(safe_text(entry.name if by_name else entry.below))
        ):
            continue
        one = _GrepOutcome(lines=[], too_big=[])
        raw = _read_entry(workspace, entry, one)
        if raw is not None:
            _grep_text(raw, entry.rel, regex, max_results + 1, one)
        if one.lines or one.too_big:
            found.append((entry.rel, one.lines, one.too_big))
    found.sort(key=lambda item: item[0])
    for _, lines, too_big in found:
        outcome.too_big += too_big
        for line in lines:
            if len(outcome.lines) >= max_results:
                outcome.capped = True
                return
            outcome.lines.append(line)


def _read_entry(workspace: Workspace, entry: _Entry, outcome: _GrepOutcome) -> bytes | None:
    if not entry.link:
        return _read_for_grep(entry.folder, entry.name, entry.rel, outcome)
    try:
        with workspace.locate(entry.rel) as target:
            return _read_for_grep(target.folder, target.name, entry.rel, outcome)
    except WorkspaceError:
        return None


def _read_for_grep(folder: int, name: str, rel: str, outcome: _GrepOutcome) -> bytes | None:
    """The file's bytes, or None when it is skipped (too big, unreadable, binary)."""
    try:
        with open_for_reading(folder, name, rel) as f:
            if os.fstat(f.fileno()).st_size > GREP_MAX_FILE_BYTES:
                outcome.too_big.append(rel)
                return None
            raw = f.read()
    except (ToolError, OSError):
        return None  # unreadable files are skipped, as grep -s does
    return None if looks_binary(raw[:SNIFF_BYTES]) else raw


def _grep_text(raw: bytes, rel: str, regex: Regex, max_results: int, outcome: _GrepOutcome) -> None:
    text = safe_text(raw.decode("utf-8", "surrogateescape"))
    for number, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if regex.search(line):
            if len(outcome.lines) >= max_results:
                outcome.capped = True
                return
            shown = line if len(line) <= GREP_LINE_MAX_CHARS else line[:GREP_LINE_MAX_CHARS] + "…"
            outcome.lines.append(f"{rel}:{number}: {shown}")


def open_for_reading(folder: int, name: str, rel: str) -> BinaryIO:
    """Open the regular file `name` of the folder handle `folder` (from `Workspace.locate`).

    `O_NOFOLLOW` refuses a symlink put in its place since it was found; `O_NONBLOCK` keeps a
    named pipe from blocking the open forever (it is then refused, as are devices and sockets).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        raise ToolError(f"cannot read {safe_text(rel)}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolError(f"{safe_text(rel)} is not a regular file (a pipe, socket or device); it cannot be read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first few KiB marks a file binary, as git and grep decide."""
    return b"\x00" in head


if __name__ == "__main__":
    _serve()
