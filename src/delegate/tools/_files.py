"""The file tools: read, write, edit, list, find and grep, each confined to the workspace root.

Every path a model gives is found with `Workspace.locate` before anything touches it, so `../x`,
absolute paths elsewhere and symlinks that lead out are refused with a `WorkspaceError`, and the
tool then works on the handle that the walk returned (`*at` calls), never on the name again: a
folder swapped for a symlink meanwhile cannot send a read, a write or a listing out of the
workspace (see `delegate.workspace._paths`). Walks never descend into a symlinked folder, and a symlinked
file is only shown when it points inside. Paths shown back to the model are workspace-relative,
and bytes of a name or a file that are not UTF-8 are shown as `\\xNN` (`delegate._text`).
Every output is capped, and a note says
how to get the rest, because one huge result would crowd everything else out of the context.

The work runs in a thread (`run_blocking`) so that a big read or grep never stalls the other
agents sharing the event loop.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import suppress
from typing import Annotated, BinaryIO

from pydantic import Field

from .._errors import ToolError, WorkspaceError
from .._text import plural, safe_text
from ..workspace import (
    SNIFF_BYTES,
    Located,
    Workspace,
    check_disk_quota,
    compile_regex,
    glance,
    looks_binary,
    open_for_reading,
    refuse_repository_head,
    search,
)
from ._tool import PathParam, ToolContext, ToolReturn, run_blocking, tool

READ_MAX_LINES = 2000
READ_MAX_BYTES = 256 * 1024
LINE_MAX_CHARS = 2000
COUNT_LINES_MAX_BYTES = 64 * 1024 * 1024
LIST_MAX_ENTRIES = 1000


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
    with _existing_file(workspace, path) as at, open_for_reading(at.folder, at.name, at.rel) as f:
        rel = safe_text(at.rel)
        size = os.fstat(f.fileno()).st_size
        if looks_binary(f.read(SNIFF_BYTES)):
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
            decoded = safe_text(raw.decode("utf-8", "surrogateescape")).rstrip("\r\n")
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
    data = _encode(content)
    with workspace.locate(path, write=True, create=True) as at:
        rel = safe_text(at.rel)
        if at.is_dir():
            raise ToolError(f"{rel} is a folder; give the path of a file inside it")
        existed = at.info is not None
        _replace_atomically(at, data, workspace)
    verb = "replaced" if existed else "created"
    return ToolReturn(
        content=f"{verb} {rel} ({len(data):,} byte{'' if len(data) == 1 else 's'} written)",
        data={"path": rel, "bytes": len(data), "created": not existed},
        progress=True,
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
    if not old:
        raise ToolError("old_string is empty; give the exact text to replace (to create a file, use write_file)")
    if old == new:
        raise ToolError("old_string and new_string are the same; there is nothing to change")
    with _existing_file(workspace, path, write=True) as at:
        return _edit_located(at, workspace, old, new, replace_all)


def _edit_located(at: Located, workspace: Workspace, old: str, new: str, replace_all: bool) -> ToolReturn:
    rel = safe_text(at.rel)
    with open_for_reading(at.folder, at.name, at.rel) as f:
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
    _replace_atomically(at, _encode(updated), workspace)
    what = f"{count} occurrences" if count > 1 else "1 occurrence"
    return ToolReturn(
        content=f"edited {rel}: replaced {what}\n{_snippet(updated, start, len(new))}",
        data={"path": rel, "replacements": count},
        progress=True,
    )


def _snippet(text: str, start: int, length: int, context: int = 3, max_lines: int = 30) -> str:
    """The lines around the first edit, numbered like read_file, so the model can check its work."""
    lines = text.removesuffix("\n").split("\n")
    first = text.count("\n", 0, start)
    last = first + text.count("\n", start, start + max(length - 1, 0))  # the line of the last new character
    low = max(0, first - context)
    high = min(len(lines), last + context + 1, low + max_lines)
    return "\n".join(f"{n + 1:>6}\t{_cut_line(lines[n])}" for n in range(low, high))


SCRATCH = ".delegate/tmp"
"""Where a file being written is made before it takes its name: hidden from agents (`HIDDEN`)."""
SCRATCH_KEPT = 600.0
"""Seconds a file in `SCRATCH` may be old before `sweep_scratch` takes it for a killed write's
(a write lasts as long as copying its bytes, never minutes)."""


def sweep_scratch(workspace: Workspace) -> None:
    """Remove what writes killed half-way left in the workspace's `SCRATCH` folder."""
    cutoff = time.time() - SCRATCH_KEPT
    with suppress(OSError), os.scandir(workspace.root / SCRATCH) as entries:
        for entry in entries:
            with suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)


def _replace_atomically(at: Located, data: bytes, workspace: Workspace) -> None:
    """Write `data` to a new file, then rename it over `at` in one step.

    The new file is made in the workspace's `.delegate/tmp/` (made when missing), which agents
    never see, so a process killed between the two steps leaves nothing in their view (nor in
    the user's, but for the hidden folder; `sweep_scratch` removes what such a kill left); only
    where that folder cannot be made, or lies on another file system, beside the file. Both steps
    work on handles (`at.folder`, the scratch folder's), never on names.

    The temporary file is created with the usual permissions (0o666 less the umask) and an
    existing file's mode is kept, less its set-user-ID and set-group-ID bits (this process may
    hold the capability that keeps them; the agent's text must not run as the file's owner).
    Renaming never follows a symlink at the destination, and it breaks hard links, so content
    never lands in a file that merely shares the name.
    """
    rel = safe_text(at.rel)
    refuse_repository_head(at.rel, data)
    check_disk_quota(workspace, len(data))
    mode: int | None = None
    info = at.found.stat()
    if info is not None and stat.S_ISREG(info.st_mode):
        if not os.access(at.name, os.W_OK, dir_fd=at.folder):
            raise ToolError(f"{rel} is read-only")
        mode = stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
    scratch = _scratch_folder(workspace)
    if scratch is not None and os.fstat(scratch).st_dev != os.fstat(at.folder).st_dev:
        os.close(scratch)
        scratch = None
    folder = scratch if scratch is not None else at.folder
    temp = f".{at.name[:180]}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(temp, flags, 0o666, dir_fd=folder)
        except OSError as exc:
            raise _os_error(exc, f"cannot write {rel}") from None
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                if mode is not None:
                    os.fchmod(out.fileno(), mode)
            os.rename(temp, at.name, src_dir_fd=folder, dst_dir_fd=at.folder)
        except BaseException as exc:
            with suppress(OSError):
                os.unlink(temp, dir_fd=folder)
            if isinstance(exc, OSError):
                raise _os_error(exc, f"cannot write {rel}") from None
            raise
    finally:
        if scratch is not None:
            os.close(scratch)


def _scratch_folder(workspace: Workspace) -> int | None:
    """A handle on the workspace's `SCRATCH` folder, made when missing; None where it cannot be.
    Each step refuses a symlink: the folder is the runtime's own, whatever is found in its place."""
    try:
        fd = os.open(workspace.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    for name in SCRATCH.split("/"):
        try:
            with suppress(FileExistsError):
                os.mkdir(name, dir_fd=fd)
            step = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        fd = step
    return fd


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
    virtual = workspace.virtual_children(path)
    if virtual is not None and path not in (".", ""):  # a folder of mounts, such as .delegate/skills
        lines = [f"{path.rstrip('/')}/ ({plural(len(virtual), 'entry', 'entries')})", *(f"{n}/" for n in virtual)]
        return "\n".join(lines)
    with workspace.locate(path) as at:
        rel = safe_text(at.rel)
        if at.info is None:
            raise ToolError(f"folder not found: {rel}")
        if not at.is_dir():
            raise ToolError(f"{rel} is a file, not a folder; use read_file to read it")
        if workspace.layer is not None:
            entries = _layered_names(workspace, at.rel)
            described = [_describe_name(workspace, at.rel, name) for name in entries[:LIST_MAX_ENTRIES]]
        else:
            entries, described = _listed(workspace, at)
        mounted = [f"{name}/" for name in virtual or ()] if at.rel == "." else []
    if not entries and not mounted:
        return f"{rel}/ is empty"
    lines = [f"{rel}/ ({plural(len(entries) + len(mounted), 'entry', 'entries')})"]
    # hidden folders that hold mounts (such as .delegate, for skills) show as folders
    lines += sorted([*described, *mounted])
    if len(entries) > LIST_MAX_ENTRIES:
        left = len(entries) - LIST_MAX_ENTRIES
        lines.append(f"[{left:,} more entries not shown; use find_files with a pattern to narrow]")
    return "\n".join(lines)


def _listed(workspace: Workspace, at: Located) -> tuple[list[os.DirEntry[str]], list[str]]:
    """The entries of the folder `at` (hidden ones left out), sorted, and the first ones described."""
    try:
        fd = at.open(os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _os_error(exc, f"cannot list {safe_text(at.rel)}") from None
    try:
        with os.scandir(fd) as found:
            entries = sorted((e for e in found if not workspace.hides(_joined(at.rel, e.name))), key=lambda e: e.name)
        return entries, [_describe_entry(workspace, at.rel, entry) for entry in entries[:LIST_MAX_ENTRIES]]
    except OSError as exc:
        raise _os_error(exc, f"cannot list {safe_text(at.rel)}") from None
    finally:
        os.close(fd)


def _layered_names(workspace: Workspace, rel: str) -> list[str]:
    """The names of the folder `rel` as an overlay subagent sees it: the workspace's, with its
    layer's over them (see `Layer.listing`), hidden ones left out."""
    assert workspace.layer is not None
    theirs: list[str] = []
    with suppress(WorkspaceError), workspace.shared.locate(rel) as low:
        if low.is_dir():
            fd = low.open(os.O_RDONLY | os.O_DIRECTORY)
            try:
                theirs = os.listdir(fd)
            finally:
                os.close(fd)
    names = workspace.layer.listing(rel, theirs)
    return [n for n in names if not workspace.hides(_joined(rel, n))]


def _describe_name(workspace: Workspace, rel: str, name: str) -> str:
    """One entry of a layered listing, described as `_describe_entry` describes a real one."""
    shown = safe_text(name)
    try:
        with glance(), workspace.locate(_joined(rel, name)) as at:
            if at.followed:
                return f"{shown} -> {safe_text(at.rel)}" + ("/" if at.is_dir() else "")
            if at.is_dir():
                return f"{shown}/"
            return f"{shown}  {_human_size(at.info.st_size)}" if at.info is not None else f"{shown}  (unreadable)"
    except WorkspaceError:
        return f"{shown} -> (outside the workspace, or a symlink loop)"


def _joined(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def _describe_entry(workspace: Workspace, rel: str, entry: os.DirEntry[str]) -> str:
    name = safe_text(entry.name)
    try:
        if entry.is_symlink():
            return f"{name} -> {_link_target(workspace, _joined(rel, entry.name))}"
        if entry.is_dir(follow_symlinks=False):
            return f"{name}/"
        return f"{name}  {_human_size(entry.stat(follow_symlinks=False).st_size)}"
    except OSError:
        return f"{name}  (unreadable)"


def _link_target(workspace: Workspace, path: str) -> str:
    """Where a symlink leads, workspace-relative; a link that leads out is named as such, no more."""
    try:
        with workspace.locate(path) as target:
            shown = safe_text(target.rel)
            if target.info is None:
                return f"{shown} (missing)"
            return shown + ("/" if target.is_dir() else "")
    except WorkspaceError:
        return "(outside the workspace, or a symlink loop)"


# ---------------------------------------------------------------------------------------------
# find_files and grep: in a child process, with RE2 (see `delegate.workspace._search`)


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
    if not pattern.strip():
        raise ToolError("pattern is empty; give a glob such as **/*.py")
    return await search(ctx.workspace, "find", {"pattern": pattern, "path": path})


@tool
async def grep(
    ctx: ToolContext,
    pattern: Annotated[str, Field(description="Regular expression (RE2 syntax), searched in each line.")],
    path: Annotated[str, Field(description="File or folder to search (default: the whole workspace).")] = ".",
    glob: Annotated[
        str | None,
        Field(description="Only files matching this glob: `*.py` matches names, `src/**/*.ts` paths."),
    ] = None,
    ignore_case: Annotated[bool, Field(description="Match letters whatever their case.")] = False,
    max_results: Annotated[int, Field(ge=1, le=1000, description="Stop after this many matching lines.")] = 100,
) -> str:
    """Search the text files of the workspace for lines that match a regular expression.

    RE2 syntax (as Python `re`, without backreferences and lookaround), matched against one line
    at a time (`^` and `$` are the line's ends). Answers with `path:line: text` for each matching
    line, in path order, up to `max_results` (a note says when there were more). Binary files,
    files over 16 MiB, and the `.git` and `.delegate` folders are skipped. Use `glob` to search
    only some files, and `read_file` with an offset to see the lines around a match.
    """
    compile_regex(pattern, ignore_case=ignore_case)  # a bad pattern is refused before anything starts
    args = {"pattern": pattern, "path": path, "glob": glob, "ignore_case": ignore_case, "max_results": max_results}
    return await search(ctx.workspace, "grep", args)


# ---------------------------------------------------------------------------------------------
# shared helpers


def _existing_file(workspace: Workspace, path: str, *, write: bool = False) -> Located:
    """The located file at `path` (the caller closes it); a `ToolError` for a folder or nothing."""
    at = workspace.locate(path, write=write)
    rel = safe_text(at.rel)
    if at.is_dir():
        at.close()
        raise ToolError(f"{rel} is a folder, not a file; use list_dir or find_files to see what it holds")
    if at.info is None:
        at.close()
        raise ToolError(f"file not found: {rel} (use find_files to look for it)")
    return at


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, which JSON allows and UTF-8 does not
        raise ToolError("the text holds invalid Unicode (a lone surrogate); it cannot be written") from None


def _os_error(exc: OSError, doing: str) -> ToolError:
    return ToolError(f"{doing}: {exc.strerror or exc}")


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
