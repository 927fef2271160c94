"""What a run reads from the store about its user besides its runs: the notes it sees and its
agents' todo lists (`delegate.memory`), and the skills it sees (those it has not disabled:
`delegate.skills`). Neither loads the database for a storeless run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._config import LOCAL_USER, Extensions
from ..memory import Reader, RunMemory
from ..skills import SkillCatalogue
from ._settings import user_level

if TYPE_CHECKING:
    from .._store import Store

__all__ = ["run_memory", "run_skills"]


def run_memory(run_id: str, user_id: str | None, workspace: Path, store: Store | None) -> RunMemory:
    """A run's memory: the notes `user_id` (None: the local user) sees in `workspace`, in `store`
    (its tables made on first use), and its agents' todo lists. Without a store, no notes, and
    todo lists that live as long as the run (SQLAlchemy is not loaded for a storeless run)."""
    reader = Reader(user_id or LOCAL_USER, str(workspace))
    if store is None:
        return RunMemory(run_id, reader, None, None)
    from ..memory import Notes, TodoStore

    notes, todos = Notes(store), TodoStore(store, migrate=False)  # the notes' migrations make both tables
    kept = todos.of_run(run_id).get("lead")  # a resumed run's lead: its list as it left it
    return RunMemory(run_id, reader, notes, todos, {"lead": kept} if kept is not None else None)


def run_skills(
    extensions: Extensions, root: Path, shared: Path | None, store: Store | None, user_id: str | None
) -> SkillCatalogue:
    """The skills of a run in `root`: the operator's (of `shared`, when `root` is a user's own
    workspace), shadowed by the workspace's own when it is a user's, less those `user_id` (None:
    the local user) disabled, or the operator did by default (`delegate.skills.SkillSettings`;
    none without a store)."""
    dirs = [Path(d) for d in extensions.skills_dirs]
    operator, own = (root, None) if shared is None else (shared, root)
    off: frozenset[str] = frozenset()
    if store is not None:
        from ..skills import SkillSettings

        off = SkillSettings(store).disabled(user_id or LOCAL_USER)
    return SkillCatalogue.build(operator, dirs=dirs, own=own, user=user_level(extensions), disabled=off)
