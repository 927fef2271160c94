"""A path rule (`deny: Write(secret/**)`, `ask: Edit(docs/**)`) judges the file a call reaches,
not the text the model wrote: the absolute path of the same file, or a link to its folder, is the
same file. The rule used to match the argument's text, so `/<workspace>/secret/key.md` (which
`write_file` accepts, and which lands in `secret/`) passed `deny: Write(secret/**)`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate import Extensions, Permissions, Runtime
from tests.test_permissions import writing_subagent


@pytest.mark.parametrize(
    "spelling",
    ["absolute", "link", "dots", "new folder", "missing dots", "missing dots absolute", "new folder in link"],
)
def test_a_denied_folder_is_denied_by_any_spelling_of_its_path(tmp_path: Path, spelling: str) -> None:
    root = tmp_path / "ws"
    (root / "secret").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "docs" / "s").symlink_to("../secret")  # made earlier by anyone with a command
    path = {
        "absolute": str(root / "secret" / "key.md"),
        "link": "docs/s/key.md",
        "dots": "docs/../secret/key.md",
        "new folder": "secret/new/key.md",
        # a folder that does not exist yet, then `..`: the write makes the folder and climbs out of it
        "missing dots": "missing/../docs/s/key.md",
        "missing dots absolute": str(root / "missing" / ".." / "docs" / "s" / "key.md"),
        "new folder in link": "docs/s/new/../key.md",
    }[spelling]
    rt = Runtime(
        model=writing_subagent(path),
        workspace=root,
        store=False,
        extensions=Extensions(permissions=Permissions(deny=["Write(secret/**)"])),
    )
    result = rt.run_sync("write")
    assert not (root / "secret" / "key.md").exists() and not (root / "secret" / "new").exists(), result.final
    assert "refused by the permission rule deny 'Write(secret/**)'" in result.final
