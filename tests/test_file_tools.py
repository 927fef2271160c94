"""The file tools as a model uses them: what they answer, and what their errors tell it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from delegate import Runtime, ToolContext, ToolError, UserError, Workspace
from delegate._messages import Message
from delegate.loop import AgentSpec, run_agent
from delegate.testing import ScriptedModel, call, reply
from delegate.tools import BUILTIN_TOOLS, READ_ONLY_TOOLS, Tool, builtin_tools, sweep_scratch
from delegate.tools._files import SCRATCH, SCRATCH_KEPT


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder.resolve()


@pytest.fixture
def ctx(root: Path) -> ToolContext:
    return ToolContext(run_id="run", agent_id="agent", workspace=Workspace.open(root), emit=lambda e: None)


async def run(ctx: ToolContext, name: str, **arguments: Any) -> str:
    return (await BUILTIN_TOOLS[name].run(ctx, arguments)).content


async def fails(ctx: ToolContext, name: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        await BUILTIN_TOOLS[name].run(ctx, arguments)
    return str(caught.value)


def lines_file(path: Path, count: int, width: int = 0) -> None:
    path.write_text("".join(f"line {n}{'x' * width}\n" for n in range(1, count + 1)))


# read_file ------------------------------------------------------------------------------------


async def test_read_file_numbers_lines_like_cat_n(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("alpha\nbeta\n")
    assert await run(ctx, "read_file", path="a.txt") == "     1\talpha\n     2\tbeta"


async def test_read_file_shows_a_range_and_says_where_to_read_on(ctx: ToolContext, root: Path) -> None:
    lines_file(root / "a.txt", 10)
    text = await run(ctx, "read_file", path="a.txt", offset=4, limit=3)
    assert text.splitlines()[:3] == ["     4\tline 4", "     5\tline 5", "     6\tline 6"]
    assert text.splitlines()[3] == "[a.txt: lines 4-6 of 10 shown; call read_file with offset=7 to read on]"


async def test_read_file_range_reaching_the_end_has_no_note(ctx: ToolContext, root: Path) -> None:
    lines_file(root / "a.txt", 10)
    assert (await run(ctx, "read_file", path="a.txt", offset=9)).splitlines() == ["     9\tline 9", "    10\tline 10"]


async def test_read_file_shows_2000_lines_by_default(ctx: ToolContext, root: Path) -> None:
    lines_file(root / "big.txt", 2500)
    text = await run(ctx, "read_file", path="big.txt")
    assert text.splitlines()[-2] == "  2000\tline 2000"
    assert "lines 1-2000 of 2500 shown; call read_file with offset=2001" in text


async def test_read_file_caps_its_output_at_256_kib(ctx: ToolContext, root: Path) -> None:
    lines_file(root / "wide.txt", 400, width=1000)
    text = await run(ctx, "read_file", path="wide.txt")
    assert len(text.encode()) <= 256 * 1024 + 200
    shown = len(text.splitlines()) - 1
    assert 200 < shown < 400
    assert text.endswith(
        f"output capped at 256 KiB; lines 1-{shown} of 400 shown; call read_file with offset={shown + 1} to read on]"
    )


async def test_read_file_cuts_very_long_lines(ctx: ToolContext, root: Path) -> None:
    (root / "min.js").write_text("x" * 5000 + "\nshort\n")
    first, second = (await run(ctx, "read_file", path="min.js")).splitlines()
    assert first == "     1\t" + "x" * 2000 + "… [line cut: 5,000 characters in all]"
    assert second == "     2\tshort"


async def test_read_file_reads_a_huge_single_line_without_holding_it(ctx: ToolContext, root: Path) -> None:
    with (root / "bundle.js").open("w") as f:
        f.write("var a=1;" * 1_000_000 + "\nend\n")
    first, second = (await run(ctx, "read_file", path="bundle.js")).splitlines()
    assert first.endswith("… [line cut: 8,000,001 bytes in all]")
    assert second == "     2\tend"


async def test_read_file_refuses_binary_files(ctx: ToolContext, root: Path) -> None:
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert await fails(ctx, "read_file", path="logo.png") == (
        "logo.png is a binary file (16 B); read_file shows text files only"
    )


async def test_read_file_names_a_missing_file(ctx: ToolContext) -> None:
    assert await fails(ctx, "read_file", path="docs/nope.md") == (
        "file not found: docs/nope.md (use find_files to look for it)"
    )


async def test_read_file_on_a_folder_points_to_list_dir(ctx: ToolContext, root: Path) -> None:
    (root / "src").mkdir()
    assert "src is a folder, not a file; use list_dir" in await fails(ctx, "read_file", path="src")


async def test_read_file_says_when_offset_is_past_the_end(ctx: ToolContext, root: Path) -> None:
    lines_file(root / "a.txt", 3)
    assert await fails(ctx, "read_file", path="a.txt", offset=9) == "a.txt has 3 lines; offset 9 is past the end"


async def test_read_file_of_an_empty_file_says_so(ctx: ToolContext, root: Path) -> None:
    (root / "empty.txt").write_text("")
    assert await run(ctx, "read_file", path="empty.txt") == "(empty.txt is empty)"


async def test_read_file_drops_windows_line_endings_and_survives_bad_utf8(ctx: ToolContext, root: Path) -> None:
    (root / "w.txt").write_bytes(b"caf\xe9\r\nok\r\n")
    # the byte is shown as \\xNN, as in every name and output
    assert await run(ctx, "read_file", path="w.txt") == "     1\tcaf\\xe9\n     2\tok"


async def test_read_file_takes_absolute_paths_inside_the_workspace(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("hi\n")
    assert await run(ctx, "read_file", path=str(root / "a.txt")) == "     1\thi"


async def test_read_file_refuses_a_named_pipe_instead_of_hanging(ctx: ToolContext, root: Path) -> None:
    os.mkfifo(root / "pipe")
    assert "pipe is not a regular file" in await fails(ctx, "read_file", path="pipe")


async def test_read_file_rejects_a_zero_offset_with_the_reason(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("hi\n")
    message = await fails(ctx, "read_file", path="a.txt", offset=0)
    assert message.startswith("invalid arguments for read_file: offset:")


# write_file -----------------------------------------------------------------------------------


async def test_write_file_creates_folders_and_counts_bytes(ctx: ToolContext, root: Path) -> None:
    returned = await BUILTIN_TOOLS["write_file"].run(ctx, {"path": "docs/api/intro.md", "content": "héllo\n"})
    assert returned.content == "created docs/api/intro.md (7 bytes written)"
    assert returned.data == {"path": "docs/api/intro.md", "bytes": 7, "created": True}
    assert (root / "docs/api/intro.md").read_text() == "héllo\n"


async def test_write_file_replaces_a_file_and_keeps_its_mode(ctx: ToolContext, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("old")
    script.chmod(0o750)
    assert await run(ctx, "write_file", path="run.sh", content="#!/bin/sh\n") == "replaced run.sh (10 bytes written)"
    assert script.read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750


async def test_write_file_gives_new_files_the_usual_permissions(ctx: ToolContext, root: Path) -> None:
    await run(ctx, "write_file", path="new.txt", content="x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((root / "new.txt").stat().st_mode) == 0o666 & ~umask


async def test_write_file_leaves_no_temporary_files(ctx: ToolContext, root: Path) -> None:
    for n in range(3):
        await run(ctx, "write_file", path="a.txt", content=str(n))
    assert sorted(os.listdir(root)) == [".delegate", "a.txt"]
    assert os.listdir(root / SCRATCH) == []


async def test_a_file_being_written_is_never_in_the_agents_view(
    ctx: ToolContext, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a process killed between writing and renaming leaves its file: in the hidden scratch
    folder, made for it in a workspace that had no `.delegate/` (found by a kill in CI)."""
    renamed: list[tuple[Path, str]] = []
    rename = os.rename

    def spy(source: str, target: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        folder = Path(os.readlink(f"/proc/self/fd/{src_dir_fd}"))
        renamed.append((folder, (folder / source).read_text()))  # written whole before it takes its name
        rename(source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "rename", spy)
    await run(ctx, "write_file", path="notes/a.md", content="body")
    await run(ctx, "edit_file", path="notes/a.md", old_string="body", new_string="text")
    assert renamed == [(root / SCRATCH, "body"), (root / SCRATCH, "text")]
    assert sorted(os.listdir(root / "notes")) == ["a.md"]


def scratch_file(root: Path, name: str, *, age: float) -> Path:
    """A file in the workspace's scratch folder, last written `age` seconds ago."""
    path = root / SCRATCH / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("half")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_a_run_clears_what_a_write_killed_before_it_left(root: Path) -> None:
    left = scratch_file(root, ".a.md.0badf00d.tmp", age=SCRATCH_KEPT + 1)
    result = Runtime(model=ScriptedModel([reply("done")]), workspace=root, store=False).run_sync("go")
    assert result.status == "completed"
    assert os.listdir(left.parent) == []


async def test_a_batch_item_clears_what_a_write_killed_before_it_left(root: Path) -> None:
    left = scratch_file(root, ".a.md.0badf00d.tmp", age=SCRATCH_KEPT + 1)
    rt = Runtime(model=ScriptedModel([call("complete", summary="done")]), workspace=root, store=False)
    output = await rt.run_task(subagent_type="general-purpose", prompt="go")
    await rt.aclose()
    assert output.status == "completed"
    assert os.listdir(left.parent) == []


def test_sweep_scratch_removes_what_killed_writes_left_and_nothing_being_written(root: Path) -> None:
    left = scratch_file(root, ".a.md.0badf00d.tmp", age=SCRATCH_KEPT + 1)
    writing = scratch_file(root, ".b.md.1badf00d.tmp", age=0)
    sweep_scratch(Workspace.open(root))
    assert os.listdir(left.parent) == [writing.name]
    bare = root / "bare"
    bare.mkdir()
    sweep_scratch(Workspace.open(bare))  # a workspace with no scratch folder: nothing to do, nothing made
    assert os.listdir(bare) == []


async def test_write_file_refuses_to_replace_a_folder(ctx: ToolContext, root: Path) -> None:
    (root / "src").mkdir()
    assert await fails(ctx, "write_file", path="src", content="x") == (
        "src is a folder; give the path of a file inside it"
    )


async def test_write_file_says_when_a_parent_is_a_file(ctx: ToolContext, root: Path) -> None:
    (root / "notes").write_text("")
    assert "part of that path is a file" in await fails(ctx, "write_file", path="notes/a.md", content="x")


async def test_write_file_respects_read_only_files(ctx: ToolContext, root: Path) -> None:
    locked = root / "locked.txt"
    locked.write_text("keep")
    locked.chmod(0o444)
    if os.access(locked, os.W_OK):
        pytest.skip("running as root: no file is read-only")
    assert await fails(ctx, "write_file", path="locked.txt", content="x") == "locked.txt is read-only"
    assert locked.read_text() == "keep"


async def test_write_file_through_a_hard_link_leaves_the_outside_file_alone(
    ctx: ToolContext, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("original")
    os.link(outside, root / "linked.txt")
    await run(ctx, "write_file", path="linked.txt", content="new")
    assert outside.read_text() == "original"
    assert (root / "linked.txt").read_text() == "new"


async def test_write_file_refuses_invalid_unicode_and_keeps_the_old_content(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("old")
    assert "invalid Unicode" in await fails(ctx, "write_file", path="a.txt", content="bad \ud800")
    assert (root / "a.txt").read_text() == "old"


# edit_file ------------------------------------------------------------------------------------


async def test_edit_file_replaces_one_exact_occurrence_and_shows_the_lines(ctx: ToolContext, root: Path) -> None:
    (root / "app.py").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    text = await run(ctx, "edit_file", path="app.py", old_string="line 5\n", new_string="five\nstill five\n")
    assert text.splitlines() == [
        "edited app.py: replaced 1 occurrence",
        "     2\tline 2",
        "     3\tline 3",
        "     4\tline 4",
        "     5\tfive",
        "     6\tstill five",
        "     7\tline 6",
        "     8\tline 7",
        "     9\tline 8",
    ]
    assert (root / "app.py").read_text().count("five") == 2


async def test_edit_file_says_when_old_string_is_missing(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("x = 1\n")
    assert await fails(ctx, "edit_file", path="a.py", old_string="x = 2", new_string="x = 3") == (
        "old_string was not found in a.py; it must match exactly, whitespace included, without the "
        "line numbers read_file shows; read the file again and copy the text"
    )


async def test_edit_file_refuses_an_ambiguous_edit_and_says_how_often(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("x = 1\nx = 1\nx = 1\n")
    message = await fails(ctx, "edit_file", path="a.py", old_string="x = 1", new_string="x = 2")
    assert message == (
        "old_string occurs 3 times in a.py; add surrounding lines to make it unique, "
        "or set replace_all=true to replace every occurrence"
    )
    assert (root / "a.py").read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_edit_file_replace_all_replaces_every_occurrence(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("x = 1\ny = 0\nx = 1\n")
    text = await run(ctx, "edit_file", path="a.py", old_string="x = 1", new_string="x = 2", replace_all=True)
    assert text.startswith("edited a.py: replaced 2 occurrences")
    assert (root / "a.py").read_text() == "x = 2\ny = 0\nx = 2\n"


async def test_edit_file_can_delete_text(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("keep\ndrop\nkeep too\n")
    await run(ctx, "edit_file", path="a.txt", old_string="drop\n", new_string="")
    assert (root / "a.txt").read_text() == "keep\nkeep too\n"


async def test_edit_file_refuses_an_empty_old_string(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("x")
    assert "old_string is empty" in await fails(ctx, "edit_file", path="a.txt", old_string="", new_string="y")


async def test_edit_file_refuses_a_no_op(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("x")
    assert "the same" in await fails(ctx, "edit_file", path="a.txt", old_string="x", new_string="x")


async def test_edit_file_names_a_missing_file(ctx: ToolContext) -> None:
    message = await fails(ctx, "edit_file", path="nope.py", old_string="a", new_string="b")
    assert message == "file not found: nope.py (use find_files to look for it)"


async def test_edit_file_leaves_non_utf8_files_untouched(ctx: ToolContext, root: Path) -> None:
    (root / "latin.txt").write_bytes(b"caf\xe9 au lait")
    message = await fails(ctx, "edit_file", path="latin.txt", old_string="au", new_string="with")
    assert message == "latin.txt is not UTF-8 text; edit_file edits text only (rewrite it with write_file)"
    assert (root / "latin.txt").read_bytes() == b"caf\xe9 au lait"


async def test_edit_file_hints_at_windows_line_endings(ctx: ToolContext, root: Path) -> None:
    (root / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    message = await fails(ctx, "edit_file", path="w.txt", old_string="one\ntwo", new_string="1\n2")
    assert "Windows line endings" in message


async def test_edit_file_keeps_the_file_mode(ctx: ToolContext, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o755)
    await run(ctx, "edit_file", path="run.sh", old_string="old", new_string="new")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


# list_dir -------------------------------------------------------------------------------------


async def test_list_dir_sorts_entries_marks_folders_and_sizes_files(ctx: ToolContext, root: Path) -> None:
    (root / "src").mkdir()
    (root / "b.txt").write_text("x" * 2048)
    (root / "a.md").write_text("hi")
    (root / "link").symlink_to("src")
    assert await run(ctx, "list_dir") == "./ (4 entries)\na.md  2 B\nb.txt  2.0 KiB\nlink -> src/\nsrc/"


async def test_list_dir_names_links_that_lead_out_without_following_them(
    ctx: ToolContext, root: Path, tmp_path: Path
) -> None:
    (root / "out").symlink_to(tmp_path)
    assert await run(ctx, "list_dir") == "./ (1 entry)\nout -> (outside the workspace, or a symlink loop)"


async def test_list_dir_lists_a_subfolder_with_its_relative_name(ctx: ToolContext, root: Path) -> None:
    (root / "src/pkg").mkdir(parents=True)
    (root / "src/pkg/mod.py").write_text("")
    assert await run(ctx, "list_dir", path="src") == "src/ (1 entry)\npkg/"
    assert await run(ctx, "list_dir", path="src/pkg") == "src/pkg/ (1 entry)\nmod.py  0 B"


async def test_list_dir_of_an_empty_folder_says_so(ctx: ToolContext, root: Path) -> None:
    (root / "empty").mkdir()
    assert await run(ctx, "list_dir", path="empty") == "empty/ is empty"


async def test_list_dir_refuses_a_file_and_names_a_missing_folder(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("")
    assert "a.txt is a file, not a folder; use read_file" in await fails(ctx, "list_dir", path="a.txt")
    assert await fails(ctx, "list_dir", path="gone") == "folder not found: gone"


async def test_list_dir_caps_long_listings_with_a_note(ctx: ToolContext, root: Path) -> None:
    for n in range(1005):
        (root / f"f{n:04}").touch()
    lines = (await run(ctx, "list_dir")).splitlines()
    assert len(lines) == 1 + 1000 + 1
    assert lines[-1] == "[5 more entries not shown; use find_files with a pattern to narrow]"


# find_files -----------------------------------------------------------------------------------


@pytest.fixture
def tree(root: Path) -> Path:
    for name in [
        "README.md",
        "setup.py",
        "src/app.py",
        "src/util.py",
        "src/deep/more/x.py",
        "docs/a.md",
        "docs/b.txt",
        ".github/ci.yml",
        ".git/config",
        ".git/hooks/pre.py",
        ".delegate/agents/r.md",
    ]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"content of {name}\nTODO: check {name}\n")
    return root


async def test_find_files_double_star_searches_every_depth(ctx: ToolContext, tree: Path) -> None:
    assert (await run(ctx, "find_files", pattern="**/*.py")).splitlines() == [
        "setup.py",
        "src/app.py",
        "src/deep/more/x.py",
        "src/util.py",
    ]


async def test_find_files_single_star_stays_in_one_folder_and_hints_otherwise(ctx: ToolContext, tree: Path) -> None:
    assert await run(ctx, "find_files", pattern="*.py") == "setup.py"
    assert await run(ctx, "find_files", pattern="*.md", path="src") == (
        "no files match *.md under src; `*.md` searches one folder only, try `**/*.md` to search at any depth"
    )


async def test_find_files_answers_workspace_relative_paths_under_path(ctx: ToolContext, tree: Path) -> None:
    assert (await run(ctx, "find_files", pattern="*.py", path="src")).splitlines() == ["src/app.py", "src/util.py"]
    assert await run(ctx, "find_files", pattern="src/deep/**/*.py") == "src/deep/more/x.py"


async def test_find_files_supports_braces_classes_and_question_marks(ctx: ToolContext, tree: Path) -> None:
    assert (await run(ctx, "find_files", pattern="docs/*.{md,txt}")).splitlines() == ["docs/a.md", "docs/b.txt"]
    assert await run(ctx, "find_files", pattern="docs/[!a].*") == "docs/b.txt"
    assert await run(ctx, "find_files", pattern="src/????.py") == "src/util.py"


async def test_find_files_marks_folders_and_matches_hidden_ones(ctx: ToolContext, tree: Path) -> None:
    assert await run(ctx, "find_files", pattern="*", path="src") == "src/app.py\nsrc/deep/\nsrc/util.py"
    assert await run(ctx, "find_files", pattern="**/*.yml") == ".github/ci.yml"


async def test_find_files_skips_git_and_delegate_folders(ctx: ToolContext, tree: Path) -> None:
    everything = await run(ctx, "find_files", pattern="**")
    assert ".git/" not in everything
    assert ".delegate" not in everything
    assert "src/deep/more/x.py" in everything


async def test_find_files_refuses_to_search_the_internal_folder(ctx: ToolContext, tree: Path) -> None:
    with pytest.raises(ToolError, match=r"\.delegate is internal state"):
        await run(ctx, "find_files", pattern="**/*.md", path=".delegate")


async def test_find_files_with_a_plain_path_checks_that_it_exists(ctx: ToolContext, tree: Path) -> None:
    assert await run(ctx, "find_files", pattern="src/app.py") == "src/app.py"
    assert await run(ctx, "find_files", pattern="src/nope.py") == "no files match src/nope.py"


async def test_find_files_caps_results_with_a_note(ctx: ToolContext, root: Path) -> None:
    (root / "many").mkdir()
    for n in range(510):
        (root / "many" / f"{n:03}.txt").touch()
    lines = (await run(ctx, "find_files", pattern="**/*.txt")).splitlines()
    assert len(lines) == 501
    assert lines[0] == "many/000.txt"
    assert lines[-1] == "[showed 500 of 510 matches of **/*.txt; narrow the pattern or the path to see the rest]"


async def test_find_files_does_not_enter_symlinked_folders(ctx: ToolContext, tree: Path) -> None:
    (tree / "alias").symlink_to("src")
    found = (await run(ctx, "find_files", pattern="**/*.py")).splitlines()
    assert not any(p.startswith("alias/") for p in found)
    assert "alias/" in await run(ctx, "find_files", pattern="*")


async def test_find_files_refuses_dot_dot_after_a_wildcard(ctx: ToolContext, tree: Path) -> None:
    assert "`..` may only come before the first wildcard" in await fails(ctx, "find_files", pattern="*/../*")


async def test_find_files_reports_a_bad_glob(ctx: ToolContext, tree: Path) -> None:
    assert "invalid glob pattern" in await fails(ctx, "find_files", pattern="[z-a]*")


async def test_find_files_treats_regex_characters_literally(ctx: ToolContext, root: Path) -> None:
    (root / "a+b (1).txt").touch()
    (root / "aab (1).txt").touch()
    assert await run(ctx, "find_files", pattern="a+b (*).txt") == "a+b (1).txt"


# grep -----------------------------------------------------------------------------------------


async def test_grep_answers_path_line_and_text_in_path_order(ctx: ToolContext, tree: Path) -> None:
    assert (await run(ctx, "grep", pattern=r"TODO: check [\w/]+\.md")).splitlines() == [
        "README.md:2: TODO: check README.md",
        "docs/a.md:2: TODO: check docs/a.md",
    ]


async def test_grep_filters_files_by_a_glob_of_names_or_of_paths(ctx: ToolContext, tree: Path) -> None:
    by_name = (await run(ctx, "grep", pattern="TODO", glob="*.py")).splitlines()
    assert by_name == [
        f"{p}:2: TODO: check {p}" for p in ["setup.py", "src/app.py", "src/deep/more/x.py", "src/util.py"]
    ]
    assert (await run(ctx, "grep", pattern="TODO", glob="src/*.py")).splitlines() == [
        "src/app.py:2: TODO: check src/app.py",
        "src/util.py:2: TODO: check src/util.py",
    ]


async def test_grep_searches_one_file_or_one_folder(ctx: ToolContext, tree: Path) -> None:
    assert await run(ctx, "grep", pattern="content", path="docs/b.txt") == "docs/b.txt:1: content of docs/b.txt"
    assert (await run(ctx, "grep", pattern="content", path="docs")).splitlines() == [
        "docs/a.md:1: content of docs/a.md",
        "docs/b.txt:1: content of docs/b.txt",
    ]


async def test_grep_can_ignore_case(ctx: ToolContext, tree: Path) -> None:
    assert await run(ctx, "grep", pattern="todo", path="docs/a.md") == "no lines match 'todo' in docs/a.md"
    assert await run(ctx, "grep", pattern="todo", path="docs/a.md", ignore_case=True) == (
        "docs/a.md:2: TODO: check docs/a.md"
    )


async def test_grep_anchors_match_line_ends(ctx: ToolContext, root: Path) -> None:
    (root / "a.py").write_text("def one():\n    pass\ndef two():\r\n")
    assert (await run(ctx, "grep", pattern=r"^def \w+\(\):$")).splitlines() == [
        "a.py:1: def one():",
        "a.py:3: def two():",
    ]


async def test_grep_caps_results_with_a_note(ctx: ToolContext, root: Path) -> None:
    lines_file(root / "log.txt", 50)
    lines = (await run(ctx, "grep", pattern="line", max_results=5)).splitlines()
    assert lines[:5] == [f"log.txt:{n}: line {n}" for n in range(1, 6)]
    assert lines[5] == (
        "[stopped at 5 matching lines; narrow the pattern, path or glob, or raise max_results (up to 1000)]"
    )


async def test_grep_exactly_at_the_cap_has_no_note(ctx: ToolContext, root: Path) -> None:
    lines_file(root / "log.txt", 5)
    assert "stopped" not in await run(ctx, "grep", pattern="line", max_results=5)


async def test_grep_reports_a_bad_regex_with_the_reason(ctx: ToolContext, tree: Path) -> None:
    assert await fails(ctx, "grep", pattern="foo(") == (
        "invalid regular expression 'foo(': missing ): foo( (the engine is RE2: no backreferences or lookaround)"
    )


async def test_grep_skips_binary_files_and_skipped_folders(ctx: ToolContext, tree: Path) -> None:
    (tree / "blob.bin").write_bytes(b"TODO\x00\x01")
    found = await run(ctx, "grep", pattern="TODO", max_results=1000)
    assert "blob.bin" not in found
    assert ".git/" not in found
    assert ".delegate" not in found


async def test_grep_cuts_long_lines(ctx: ToolContext, root: Path) -> None:
    (root / "min.js").write_text("needle" + "x" * 1000)
    assert await run(ctx, "grep", pattern="needle") == "min.js:1: needle" + "x" * 494 + "…"


async def test_grep_names_a_missing_path(ctx: ToolContext) -> None:
    assert await fails(ctx, "grep", pattern="x", path="nope") == "no such file or folder: nope"


# the built-in catalogue -----------------------------------------------------------------------


def test_builtin_tools_are_all_there_and_bash_needs_allow_commands() -> None:
    names = ["read_file", "write_file", "edit_file", "list_dir", "find_files", "grep", "bash"]
    assert list(BUILTIN_TOOLS) == names
    assert [t.name for t in builtin_tools(allow_commands=True)] == names
    assert [t.name for t in builtin_tools(allow_commands=False)] == names[:-1]
    assert [t.name for t in builtin_tools(["grep", "bash", "grep"], allow_commands=False)] == ["grep"]


def test_read_only_tools_cannot_change_the_workspace() -> None:
    assert [t.name for t in builtin_tools(READ_ONLY_TOOLS, allow_commands=True)] == list(READ_ONLY_TOOLS)
    assert not {"write_file", "edit_file", "bash"} & set(READ_ONLY_TOOLS)


def test_unknown_builtin_tool_lists_the_known_ones() -> None:
    with pytest.raises(UserError) as caught:
        builtin_tools(["read_file", "Read"], allow_commands=False)
    assert str(caught.value) == (
        "unknown built-in tool 'Read'; the built-in tools are: "
        "bash, edit_file, find_files, grep, list_dir, read_file, write_file"
    )


@pytest.mark.parametrize("tool", list(BUILTIN_TOOLS.values()), ids=list(BUILTIN_TOOLS))
def test_every_builtin_tool_describes_itself_and_each_parameter(tool: Tool) -> None:
    assert len(tool.description) > 200
    assert tool.parameters["properties"]
    for name, prop in tool.parameters["properties"].items():
        assert prop.get("description"), f"{tool.name}.{name} has no description"


# through the turn loop ------------------------------------------------------------------------


async def test_tool_errors_reach_the_model_as_error_results_and_the_run_goes_on(ctx: ToolContext, root: Path) -> None:
    model = ScriptedModel(
        [
            call("write_file", path="notes/plan.md", content="step one\n"),
            call("read_file", path="../../etc/passwd"),
            call("edit_file", path="notes/plan.md", old_string="step two", new_string="x"),
            call("read_file", path="notes/plan.md"),
            reply("done"),
        ]
    )
    spec = AgentSpec(name="lead", instructions="work", model=model, tools=builtin_tools(allow_commands=False))
    result = await run_agent(spec, ctx, [Message.user("write the plan")])

    assert (result.status, result.final) == ("completed", "done")
    model.assert_complete()
    outcomes = [(p.name, p.is_error, p.content) for m in result.messages for p in m.tool_results]
    assert outcomes == [
        ("write_file", False, "created notes/plan.md (9 bytes written)"),
        ("read_file", True, "Error: path '../../etc/passwd' is outside the workspace"),
        ("edit_file", True, outcomes[2][2]),
        ("read_file", False, "     1\tstep one"),
    ]
    assert outcomes[2][2].startswith("Error: old_string was not found in notes/plan.md")
    assert (root / "notes/plan.md").read_text() == "step one\n"


async def test_the_model_is_told_what_each_tool_does(ctx: ToolContext) -> None:
    model = ScriptedModel([reply("nothing to do")])
    spec = AgentSpec(name="lead", instructions="work", model=model, tools=builtin_tools(allow_commands=False))
    await run_agent(spec, ctx, [Message.user("hi")])
    sent = {t.name: t for t in model.requests[0].tools}
    assert set(sent) == set(READ_ONLY_TOOLS) | {"write_file", "edit_file"}
    assert "line numbers" in sent["read_file"].description
    assert sent["grep"].parameters["properties"]["max_results"]["maximum"] == 1000


async def test_a_name_that_is_not_utf8_is_shown_with_escapes_and_can_be_given_back(
    ctx: ToolContext, root: Path
) -> None:
    """A byte that is not UTF-8 (0xe9 of Latin-1, 0xff) in a file name reached the model request
    as a lone surrogate, which no SDK can encode: the run ended `error`. Now every tool shows it
    as `\\xNN`, and the model can name the file so."""
    folder = os.path.join(os.fsencode(root), b"caf\xe9")
    os.mkdir(folder)
    Path(os.fsdecode(os.path.join(folder, b"n\xff.txt"))).write_bytes(b"hello \xff\n")
    shown = [
        await run(ctx, "list_dir", path="."),
        await run(ctx, "find_files", pattern="**/*"),
        await run(ctx, "grep", pattern="hello"),
        await run(ctx, "read_file", path="caf\\xe9/n\\xff.txt"),
    ]
    assert shown == [
        "./ (1 entry)\ncaf\\xe9/",
        "caf\\xe9/\ncaf\\xe9/n\\xff.txt",
        "caf\\xe9/n\\xff.txt:1: hello \\xff",
        "     1\thello \\xff",
    ]
    for text in shown:
        text.encode("utf-8")  # what reaches the model, the store and the terminal encodes
    await run(ctx, "write_file", path="caf\\xe9/plain.txt", content="hello")  # into the folder of that name
    await run(ctx, "edit_file", path="caf\\xe9/plain.txt", old_string="hello", new_string="bye")
    assert Path(os.fsdecode(os.path.join(folder, b"plain.txt"))).read_text() == "bye"


async def test_a_write_past_the_workspaces_disk_quota_is_refused_and_writes_nothing(root: Path) -> None:
    from delegate.workspace import CommandLimits, CommandPolicy

    policy = CommandPolicy(limits=CommandLimits(disk_quota=64 * 1024))
    ctx = ToolContext(run_id="r", agent_id="a", workspace=Workspace.open(root, commands=policy), emit=lambda e: None)
    await run(ctx, "write_file", path="small.txt", content="x" * 1000)
    refused = await fails(ctx, "write_file", path="big.txt", content="x" * 100_000)
    assert "disk quota" in refused and "delete files you no longer need" in refused
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["small.txt"]
    assert not list((root / SCRATCH).iterdir())  # no half-written file left behind either
