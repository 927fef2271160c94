"""The file tools: read, write, edit, list, find and grep, each confined to the workspace root.

Every path a model gives goes through `Workspace.resolve` before anything touches it, so `../x`,
absolute paths elsewhere and symlinks that lead out are refused with a `WorkspaceError`. Walks
never descend into a symlinked folder, and a symlinked file is only shown when it points inside.
Paths shown back to the model are workspace-relative. Every output is capped, and a note says
how to get the rest, because one huge result would crowd everything else out of the context.

The work runs in a thread (`run_blocking`) so that a big read or grep never stalls the other
agents sharing the event loop.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, BinaryIO

from pydantic import Field

from .._errors import ToolError, WorkspaceError
from .._workspace import Workspace
from ._tool import PathParam, ToolContext, ToolReturn, run_blocking, tool

READ_MAX_LINES = 2000
READ_MAX_BYTES = 256 * 1024
LINE_MAX_CHARS = 2000
COUNT_LINES_MAX_BYTES = 64 * 1024 * 1024
LIST_MAX_ENTRIES = 1000
FIND_MAX_RESULTS = 500
GREP_LINE_MAX_CHARS = 500
GREP_MAX_FILE_BYTES = 16 * 1024 * 1024
SNIFF_BYTES = 8192
SKIPPED_DIRS = frozenset({".git", ".delegate"})
"""Folders that walks (find_files, grep) step over: version control internals and our own store."""


# ---------------------------------------------------------------------------------------------
# read_file


@tool
async def read_file(
    ctx: ToolContext,
    path: Annotated[
        str, PathParam(), Field(description="File to read: relative to the workspace root, or absolute inside it.")
    ],
    offset: Annotated[int, Field(ge=1, description="Line number to start at (1 = first line).")] = 1,
    limit: Annotated[
        int | None,
        Field(ge=1, description=f"How many lines to show; default {READ_MAX_LINES}."),
    ] = None,
) -> str:
    """Read a text file of the workspace, with line numbers (like `cat -n`).

    Shows up to 2000 lines (and at most 256 KiB) from `offset` on; when the file goes on, a note
    at the end says which `offset` to call again with. Lines longer than 2000 characters are cut.
    Binary files are refused. The line numbers are not part of the file: leave them out when you
    quote text to `edit_file`. Read a big file in parts rather than all at once, or `grep` it to
    find the lines you need first.
    """
    return await run_blocking(_read_file, ctx.workspace, path, offset, limit or READ_MAX_LINES)


def _read_file(workspace: Workspace, path: str, offset: int, limit: int) -> str:
    real = _existing_file(workspace, path)
    rel = workspace.relative(real)
    with _open_for_reading(real, rel) as f:
        size = os.fstat(f.fileno()).st_size
        if _looks_binary(f.read(SNIFF_BYTES)):
            raise ToolError(f"{rel} is a binary file ({_human_size(size)}); read_file shows text files only")
        f.seek(0)
        shown: list[str] = []
        used = 0
        seen = 0  # lines read so far, shown or not
        stopped = capped_by_size = False
        for raw, length in _lines(f, keep=LINE_MAX_CHARS * 4):
            seen += 1
            if seen < offset:
                continue
            decoded = raw.decode("utf-8", "replace").rstrip("\r\n")
            line = _cut_line(decoded, length if length > len(raw) else None)
            entry = f"{seen:>6}\t{line}\n"
            used += len(entry.encode())
            capped_by_size = used > READ_MAX_BYTES and bool(shown)
            if len(shown) >= limit or capped_by_size:
                stopped = True
                break
            shown.append(entry)
        total = seen + _count_lines(f) if stopped and size <= COUNT_LINES_MAX_BYTES else seen
    if not shown:
        if seen == 0:
            return f"({rel} is empty)"
        raise ToolError(f"{rel} has {seen} lines; offset {offset} is past the end")
    text = "".join(shown)
    if not stopped:
        return text.rstrip("\n")
    last = offset + len(shown) - 1
    of_total = f" of {total}" if size <= COUNT_LINES_MAX_BYTES else f" ({_human_size(size)} in all)"
    why = f"output capped at {READ_MAX_BYTES // 1024} KiB; " if capped_by_size else ""
    read_on = f"call read_file with offset={last + 1} to read on"
    return f"{text}[{rel}: {why}lines {offset}-{last}{of_total} shown; {read_on}]"


def _count_lines(f: BinaryIO) -> int:
    """Lines left in `f` from where it stands, counted in big chunks (a last line may lack its \\n)."""
    count = 0
    last = b"\n"
    while chunk := f.read(1 << 20):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")


def _lines(f: BinaryIO, *, keep: int) -> Iterator[tuple[bytes, int]]:
    """Each line of `f` as (its first `keep` bytes, its length in bytes).

    A line longer than `keep` is read on in chunks and dropped, so one huge line (a minified
    bundle, a log without newlines) never sits in memory whole.
    """
    while line := f.readline(keep):
        length = len(line)
        if length == keep and not line.endswith(b"\n"):
            while rest := f.readline(1 << 16):
                length += len(rest)
                if rest.endswith(b"\n"):
                    break
        yield line, length


def _cut_line(line: str, length: int | None = None) -> str:
    """`line` cut to LINE_MAX_CHARS; `length` is its full size in bytes when only its head was read."""
    if len(line) <= LINE_MAX_CHARS and length is None:
        return line
    size = f"{length:,} bytes" if length is not None else f"{len(line):,} characters"
    return f"{line[:LINE_MAX_CHARS]}… [line cut: {size} in all]"


# ---------------------------------------------------------------------------------------------
# write_file and edit_file


@tool
async def write_file(
    ctx: ToolContext,
    path: Annotated[
        str,
        PathParam("new"),
        Field(description="File to write: relative to the workspace root, or absolute inside it."),
    ],
    content: Annotated[str, Field(description="The whole new content of the file (UTF-8 text).")],
) -> ToolReturn:
    """Write a text file of the workspace, replacing it if it exists; missing folders are created.

    The file is written whole and atomically: anyone reading it sees the old content or the new,
    never half of it. To change part of an existing file, `edit_file` is cheaper and safer than
    writing it all again. Answers with the number of bytes written.
    """
    return await run_blocking(_write_file, ctx.workspace, path, content)


def _write_file(workspace: Workspace, path: str, content: str) -> ToolReturn:
    real = workspace.resolve(path)
    rel = workspace.relative(real)
    if real.is_dir():
        raise ToolError(f"{rel} is a folder; give the path of a file inside it")
    existed = real.exists()
    data = _encode(content)
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"cannot create the folders of {rel}: part of that path is a file") from None
    except OSError as exc:
        raise _os_error(exc, f"cannot create the folders of {rel}") from None
    _replace_atomically(real, rel, data)
    verb = "replaced" if existed else "created"
    return ToolReturn(
        content=f"{verb} {rel} ({len(data):,} byte{'' if len(data) == 1 else 's'} written)",
        data={"path": rel, "bytes": len(data), "created": not existed},
    )


@tool
async def edit_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File to edit: relative to the workspace root, or absolute inside it.")],
    old_string: Annotated[
        str,
        Field(description="Exact text to replace, whitespace and indentation included, without line numbers."),
    ],
    new_string: Annotated[str, Field(description="Text to put in its place (may be empty, to delete).")],
    replace_all: Annotated[
        bool, Field(description="Replace every occurrence; otherwise old_string must occur exactly once.")
    ] = False,
) -> ToolReturn:
    """Replace an exact piece of text in a file of the workspace.

    `old_string` must match the file exactly, character for character; read the file first. It
    must occur once, unless `replace_all` is set: if it occurs more often, add a few surrounding
    lines to make it unique. Answers with the edited lines and their numbers. Only UTF-8 text
    files can be edited; to create a file, use `write_file`.
    """
    return await run_blocking(_edit_file, ctx.workspace, path, old_string, new_string, replace_all)


def _edit_file(workspace: Workspace, path: str, old: str, new: str, replace_all: bool) -> ToolReturn:
    real = _existing_file(workspace, path)
    rel = workspace.relative(real)
    if not old:
        raise ToolError("old_string is empty; give the exact text to replace (to create a file, use write_file)")
    if old == new:
        raise ToolError("old_string and new_string are the same; there is nothing to change")
    with _open_for_reading(real, rel) as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{rel} is not UTF-8 text; edit_file edits text only (rewrite it with write_file)") from None
    count = text.count(old)
    if count == 0:
        hint = " (the file has Windows line endings: use \\r\\n in old_string)" if "\r\n" in text else ""
        raise ToolError(
            f"old_string was not found in {rel}{hint}; it must match exactly, whitespace included, "
            "without the line numbers read_file shows; read the file again and copy the text"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {rel}; add surrounding lines to make it unique, "
            "or set replace_all=true to replace every occurrence"
        )
    start = text.index(old)
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    _replace_atomically(real, rel, _encode(updated))
    what = f"{count} occurrences" if count > 1 else "1 occurrence"
    return ToolReturn(
        content=f"edited {rel}: replaced {what}\n{_snippet(updated, start, len(new))}",
        data={"path": rel, "replacements": count},
    )


def _snippet(text: str, start: int, length: int, context: int = 3, max_lines: int = 30) -> str:
    """The lines around the first edit, numbered like read_file, so the model can check its work."""
    lines = text.removesuffix("\n").split("\n")
    first = text.count("\n", 0, start)
    last = first + text.count("\n", start, start + max(length - 1, 0))  # the line of the last new character
    low = max(0, first - context)
    high = min(len(lines), last + context + 1, low + max_lines)
    return "\n".join(f"{n + 1:>6}\t{_cut_line(lines[n])}" for n in range(low, high))


def _replace_atomically(real: Path, rel: str, data: bytes) -> None:
    """Write `data` to a new file beside `real`, then rename it over `real` in one step.

    The temporary file is created with the usual permissions (0o666 less the umask) and an
    existing file's mode is kept. Renaming never follows a symlink at the destination, and it
    breaks hard links, so content never lands in a file that merely shares the name.
    """
    mode: int | None = None
    with suppress(FileNotFoundError):
        info = real.lstat()
        if stat.S_ISREG(info.st_mode):
            if not os.access(real, os.W_OK):
                raise ToolError(f"{rel} is read-only")
            mode = stat.S_IMODE(info.st_mode)
    temp = real.with_name(f".{real.name[:180]}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temp, flags, 0o666)
    except OSError as exc:
        raise _os_error(exc, f"cannot write {rel}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, real)
    except BaseException as exc:
        with suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise _os_error(exc, f"cannot write {rel}") from None
        raise


# ---------------------------------------------------------------------------------------------
# list_dir


@tool
async def list_dir(
    ctx: ToolContext,
    path: Annotated[
        str, Field(description="Folder to list: relative to the workspace root (default: the root itself).")
    ] = ".",
) -> str:
    """List one folder of the workspace: its entries sorted by name, folders marked with a `/`.

    Files show their size; symlinks show where they point. Shows up to 1000 entries. It does not
    go into subfolders: use `find_files` with a `**` pattern to see a whole tree.
    """
    return await run_blocking(_list_dir, ctx.workspace, path)


def _list_dir(workspace: Workspace, path: str) -> str:
    real = workspace.resolve(path)
    rel = workspace.relative(real)
    if not real.exists():
        raise ToolError(f"folder not found: {rel}")
    if not real.is_dir():
        raise ToolError(f"{rel} is a file, not a folder; use read_file to read it")
    try:
        with os.scandir(real) as found:
            entries = sorted(found, key=lambda e: e.name)
    except OSError as exc:
        raise _os_error(exc, f"cannot list {rel}") from None
    if not entries:
        return f"{rel}/ is empty"
    lines = [f"{rel}/ ({_plural(len(entries), 'entry', 'entries')})"]
    lines += [_describe_entry(workspace, entry) for entry in entries[:LIST_MAX_ENTRIES]]
    if len(entries) > LIST_MAX_ENTRIES:
        left = len(entries) - LIST_MAX_ENTRIES
        lines.append(f"[{left:,} more entries not shown; use find_files with a pattern to narrow]")
    return "\n".join(lines)


def _describe_entry(workspace: Workspace, entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return f"{entry.name} -> {_link_target(workspace, entry.path)}"
        if entry.is_dir(follow_symlinks=False):
            return f"{entry.name}/"
        return f"{entry.name}  {_human_size(entry.stat(follow_symlinks=False).st_size)}"
    except OSError:
        return f"{entry.name}  (unreadable)"


def _link_target(workspace: Workspace, path: str) -> str:
    """Where a symlink leads, workspace-relative; a link that leads out is named as such, no more."""
    try:
        target = workspace.resolve(path)
    except WorkspaceError:
        return "(outside the workspace, or a symlink loop)"
    if not target.exists():
        return f"{workspace.relative(target)} (missing)"
    return workspace.relative(target) + ("/" if target.is_dir() else "")


# ---------------------------------------------------------------------------------------------
# find_files


@tool
async def find_files(
    ctx: ToolContext,
    pattern: Annotated[
        str,
        Field(description="Glob pattern, relative to `path`: e.g. `**/*.py`, `src/*.md`, `**/test_*.{py,txt}`."),
    ],
    path: Annotated[str, Field(description="Folder to search in (default: the workspace root).")] = ".",
) -> str:
    """Find files and folders of the workspace whose path matches a glob pattern.

    `*` matches within one path segment, `**` any number of folders, `?` one character, `[abc]`
    one of a set, `{a,b}` either word. So `*.py` finds Python files in the folder itself only,
    and `**/*.py` finds them at any depth. Answers with workspace-relative paths, sorted,
    folders marked with a `/`, up to 500 (a note says when there were more). Hidden files
    match; the `.git` and `.delegate` folders are skipped, and symlinked folders are not entered.
    To search inside files, use `grep`.
    """
    return await run_blocking(_find_files, ctx.workspace, pattern, path)


def _find_files(workspace: Workspace, pattern: str, path: str) -> str:
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
        if matcher.match(candidate.relative_to(base).as_posix()):
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
    resolves inside the workspace. `.git` and `.delegate` are stepped over. `max_depth` counts
    path segments below `base`.
    """
    for folder, dirnames, filenames in os.walk(base):
        depth = len(Path(folder).relative_to(base).parts)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        entries = [(d, True) for d in dirnames] + [(f, False) for f in sorted(filenames)]
        if max_depth is not None and depth + 1 >= max_depth:
            dirnames[:] = []  # deeper entries could not match
        for name, is_dir in entries:
            candidate = Path(folder, name)
            if candidate.is_symlink():
                try:
                    target = workspace.resolve(candidate)
                except WorkspaceError:
                    continue
                is_dir = target.is_dir()
            yield candidate, is_dir


def _is_magic(segment: str) -> bool:
    return any(c in segment for c in "*?[{")


def _glob_regex(segments: tuple[str, ...] | list[str]) -> re.Pattern[str]:
    """A regex for a `/`-separated glob where `**` spans folders and `*` stays within one segment."""
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment_regex(segment) + ("" if last else "/"))
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as exc:  # such as a bad range in a class: [z-a]
        raise ToolError(f"invalid glob pattern {'/'.join(segments)!r}: {exc}") from None


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
            body = "".join(c if c == "-" else re.escape(c) for c in (body[1:] if negate else body))
            out.append("[" + ("^/" if negate else "") + body.replace("--", "-\\-") + "]")
            i = end + 1
        elif c == "{" and (end := _brace_end(segment, i)) > 0:
            options = _split_top_level(segment[i:end])
            out.append("(?:" + "|".join(_segment_regex(o) for o in options) + ")")
            i = end + 1
        else:
            out.append(re.escape(c))
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


@tool
async def grep(
    ctx: ToolContext,
    pattern: Annotated[str, Field(description="Python regular expression, searched in each line.")],
    path: Annotated[str, Field(description="File or folder to search (default: the whole workspace).")] = ".",
    glob: Annotated[
        str | None,
        Field(description="Only files matching this glob: `*.py` matches names, `src/**/*.ts` paths."),
    ] = None,
    ignore_case: Annotated[bool, Field(description="Match letters whatever their case.")] = False,
    max_results: Annotated[int, Field(ge=1, le=1000, description="Stop after this many matching lines.")] = 100,
) -> str:
    """Search the text files of the workspace for lines that match a regular expression.

    Python `re` syntax, matched against one line at a time (`^` and `$` are the line's ends).
    Answers with `path:line: text` for each matching line, in path order, up to `max_results`
    (a note says when there were more). Binary files, files over 16 MiB, and the `.git` and
    `.delegate` folders are skipped. Use `glob` to search only some files, and `read_file` with
    an offset to see the lines around a match.
    """
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    return await run_blocking(_grep, ctx.workspace, regex, path, glob, max_results)


@dataclass(kw_only=True, slots=True)
class _GrepOutcome:
    lines: list[str]
    too_big: list[str]
    capped: bool = False


def _grep(workspace: Workspace, regex: re.Pattern[str], path: str, glob: str | None, max_results: int) -> str:
    base = workspace.resolve(path)
    rel = workspace.relative(base)
    if not base.exists():
        raise ToolError(f"no such file or folder: {rel}")
    outcome = _GrepOutcome(lines=[], too_big=[])
    for file in _grep_files(workspace, base, glob):
        _grep_file(workspace, file, regex, max_results, outcome)
        if outcome.capped:
            break
    text = "\n".join(outcome.lines) if outcome.lines else f"no lines match {regex.pattern!r} in {rel}"
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
        if matcher is None or matcher.match(candidate.name if by_name else rel):
            files.append((rel, candidate))
    files.sort()  # path order, as find_files answers, rather than the walk's folder-by-folder order
    yield from (path for _, path in files)


def _grep_file(
    workspace: Workspace, file: Path, regex: re.Pattern[str], max_results: int, outcome: _GrepOutcome
) -> None:
    real = workspace.resolve(file) if file.is_symlink() else file  # a link is read at its (inside) target
    rel = workspace.relative(file)
    try:
        with _open_for_reading(real, rel) as f:
            if os.fstat(f.fileno()).st_size > GREP_MAX_FILE_BYTES:
                outcome.too_big.append(rel)
                return
            raw = f.read()
    except (ToolError, OSError):
        return  # unreadable files are skipped, as grep -s does
    if _looks_binary(raw[:SNIFF_BYTES]):
        return
    for number, line in enumerate(raw.decode("utf-8", "replace").split("\n"), 1):
        line = line.rstrip("\r")
        if regex.search(line):
            if len(outcome.lines) >= max_results:
                outcome.capped = True
                return
            shown = line if len(line) <= GREP_LINE_MAX_CHARS else line[:GREP_LINE_MAX_CHARS] + "…"
            outcome.lines.append(f"{rel}:{number}: {shown}")


# ---------------------------------------------------------------------------------------------
# shared helpers


def _existing_file(workspace: Workspace, path: str) -> Path:
    real = workspace.resolve(path)
    rel = workspace.relative(real)
    if real.is_dir():
        raise ToolError(f"{rel} is a folder, not a file; use list_dir or find_files to see what it holds")
    if not real.exists():
        raise ToolError(f"file not found: {rel} (use find_files to look for it)")
    return real


def _open_for_reading(real: Path, rel: str) -> BinaryIO:
    """Open a resolved regular file for reading.

    `O_NOFOLLOW` refuses a symlink put in its place since it was resolved; `O_NONBLOCK` keeps a
    named pipe from blocking the open forever (it is then refused, as are devices and sockets).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise _os_error(exc, f"cannot read {rel}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolError(f"{rel} is not a regular file (a pipe, socket or device); it cannot be read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, which JSON allows and UTF-8 does not
        raise ToolError("the text holds invalid Unicode (a lone surrogate); it cannot be written") from None


def _looks_binary(head: bytes) -> bool:
    """A NUL byte in the first few KiB marks a file binary, as git and grep decide."""
    return b"\x00" in head


def _os_error(exc: OSError, doing: str) -> ToolError:
    return ToolError(f"{doing}: {exc.strerror or exc}")


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"
