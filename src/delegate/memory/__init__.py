"""Memory and todos: notes kept from one run for the next, per user and workspace (searched with
the database's own full-text search), and each agent's todo list of its run.

`Notes`, `TodoStore` and `MEMORY_MIGRATIONS` hold the database (SQLAlchemy): imported on first use,
so a storeless run never loads it; so is a run's side (`RunMemory`, its tools), so reading a stored
run's todos loads no agents or tools.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from typing import TYPE_CHECKING

from .. import _lazy
from ._model import MAX_NOTE_CHARS, SCOPES, Note, Reader, Scope, Todo, parse_todos, render_todos, todos_json

if TYPE_CHECKING:
    from ._notes import Notes
    from ._schema import MEMORY_MIGRATIONS
    from ._todos import TodoStore
    from ._tools import RunMemory, frame_notes, place_of

__getattr__ = _lazy.lazy_names(
    __name__,
    {
        "MEMORY_MIGRATIONS": "._schema",
        "Notes": "._notes",
        "RunMemory": "._tools",
        "TodoStore": "._todos",
        "frame_notes": "._tools",
        "place_of": "._tools",
    },
)

__all__ = [
    "MAX_NOTE_CHARS",
    "MEMORY_MIGRATIONS",
    "SCOPES",
    "Note",
    "Notes",
    "Reader",
    "RunMemory",
    "Scope",
    "Todo",
    "TodoStore",
    "frame_notes",
    "parse_todos",
    "place_of",
    "render_todos",
    "todos_json",
]
