"""Agent definitions and their catalogue.

The definitions, plain data (`_definitions.py`: `Agent`, `Lead`, `Subagent`, the built-in types and
the tool sets they draw on); the reading of definition files as Claude Code reads them
(`_files.py`, with the forgiving front matter of `_frontmatter.py`, which skills read too); and the
`Catalogue` of the types an agent may start (`_catalogue.py`: every source, in order, with the
warnings of its files).

Its `__all__` is for extension authors; users import `Agent`, `Lead`, `Subagent`, `Catalogue` and
`CatalogueWarning` from `delegate` (docs/api.md).
"""

from ._catalogue import Catalogue
from ._definitions import (
    BUILTIN_SUBAGENTS,
    MEMORY_TOOLS,
    NAME,
    NEVER_GIVEN,
    WRITE_TOOLS,
    Agent,
    Lead,
    Subagent,
    tools_for,
)
from ._files import CLAUDE_TOOL_NAMES, bash_rules, load_definition, load_folder, map_tools, tool_names
from ._frontmatter import CatalogueWarning, Unreadable, display_name, read_front_matter

__all__ = [
    "BUILTIN_SUBAGENTS",
    "CLAUDE_TOOL_NAMES",
    "MEMORY_TOOLS",
    "NAME",
    "NEVER_GIVEN",
    "WRITE_TOOLS",
    "Agent",
    "Catalogue",
    "CatalogueWarning",
    "Lead",
    "Subagent",
    "Unreadable",
    "bash_rules",
    "display_name",
    "load_definition",
    "load_folder",
    "map_tools",
    "read_front_matter",
    "tool_names",
    "tools_for",
]
