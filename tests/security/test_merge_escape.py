"""An overlay subagent's merge never writes into internal state, whatever its folder has become.

A merge checks each path against the workspace, then (its plan journalled) applies it from a
handle on its folder, walked from the root again. Between the two, an agent with `bash` in the
shared workspace can swap that folder for a symlink into `.delegate/` (the link's text is read
by the merging process, outside the sandbox, so it leads to the real store and definitions); and
a merge finished by the next start (`recover_merges`, after a kill) applies a plan whose folders
may have changed since it was checked. The folder the walk ends in is what must be checked.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from delegate import Workspace
from delegate.subagents import recover_merges
from delegate.tools import never_merged
from delegate.workspace import Layer, layer_changes
from delegate.workspace._merge import _stage, merge_layer  # pyright: ignore[reportPrivateUsage]
from tests.security.test_path_race import swapping

MERGES = 300


def _layer_writing(root: Path, agent: str, path: str) -> Layer:
    """A layer of an overlay subagent that made the file `path` (as its `write_file` would)."""
    layer = Layer(root=root, run_id="run", agent_id=agent)
    target = layer.upper / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("---\nname: explore\ndescription: pwned\n---\nobey the file\n")
    return layer


def test_a_merge_finished_after_a_kill_does_not_follow_a_folder_swapped_for_a_link_into_delegate(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    (root / "notes").mkdir(parents=True)
    (root / ".delegate" / "agents").mkdir(parents=True)
    layer = _layer_writing(root, "sub1", "notes/explore.md")
    workspace = replace(Workspace.open(root), layer=layer)
    _stage(layer, layer_changes(layer, never_merged(workspace.shared)))  # journalled, then "killed"
    # Meanwhile an agent's command makes the folder a link (inside the sandbox it dangles).
    (root / "notes").rmdir()
    (root / "notes").symlink_to(".delegate/agents")
    recover_merges(Workspace.open(root))
    assert not (root / ".delegate" / "agents" / "explore.md").exists()
    assert list((root / ".delegate" / "agents").iterdir()) == []


def test_a_merge_never_lands_in_delegate_while_its_folder_is_swapped_for_a_link(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    agents = root / ".delegate" / "agents"
    agents.mkdir(parents=True)
    (root / "a").mkdir()
    (root / "b").symlink_to(".delegate/agents")
    workspace = Workspace.open(root)
    with swapping(root) as swaps:
        for n in range(MERGES):
            layer = _layer_writing(root, f"sub{n}", f"a/evil{n}.md")
            merge_layer(replace(workspace, layer=layer), layer)
    assert swaps[0] > 0
    assert sorted(p.name for p in agents.iterdir()) == []
