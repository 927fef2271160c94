"""A run's gates: every rule that can stop a call (the `--allow`/`--ask`/`--deny` rules and the
permission mode of `Permissions`, the hooks of the operator's settings files, of definitions and
in code). `Gates` holds them compiled, one object a runtime builds once and each run reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..permissions import CallPolicy, CommandHook, Permissions, command_hooks, read_settings
from ..tools import HookSet

if TYPE_CHECKING:
    from .._agents import Catalogue
    from ..workspace import Workspace


@dataclass(frozen=True, kw_only=True, eq=False)
class Gates:
    """What can stop a call of a run: its permission rules and mode (`permissions`, compiled as
    `policy`) and its hooks (None: none). See docs/approvals.md."""

    permissions: Permissions
    policy: CallPolicy
    hooks: HookSet | None = None

    @classmethod
    def build(
        cls, given: Permissions | None, folder: Path, catalogue: Catalogue, shared: Path | None, workspace: Workspace
    ) -> Gates:
        """`given` with the rules and hooks of the operator's settings files in `folder` (unless
        it says not to read them) and the hooks of each definition of `catalogue`."""
        permissions, settings = load_permissions(given, folder)
        return cls(
            permissions=permissions,
            policy=CallPolicy.compile(permissions),
            hooks=build_hooks(permissions, settings, catalogue, shared, workspace),
        )

    @property
    def active(self) -> bool:
        """Whether any rule, mode or hook may act on a call (else no tool is wrapped at all)."""
        return bool(self.permissions) or self.hooks is not None


def load_permissions(given: Permissions | None, folder: Path) -> tuple[Permissions, list[dict[str, Any]]]:
    """`given` merged with the rules of the settings files of `folder` (the operator's), and those
    files' command hooks; only `given` when it says not to read them."""
    given = given or Permissions()
    if not given.settings_files:
        return given, []
    found, hooks = read_settings(folder)
    return given.merged(found), hooks


def build_hooks(
    permissions: Permissions,
    settings: list[dict[str, Any]],
    catalogue: Catalogue,
    shared: Path | None,
    workspace: Workspace,
) -> HookSet | None:
    """The runtime's hooks: the Python ones of `permissions`, the commands of the operator's
    settings files (`settings`, see `read_settings`) and of each type's definition (for that type
    alone), run in the operator's folder (`shared` under `delegate serve`, else the workspace).
    None when there are none. A definition whose `hooks` cannot be read is a `UserError`."""
    commands: list[CommandHook] = []
    for entry in settings:
        commands += command_hooks(entry["hooks"], entry["file"])
    for definition in catalogue.definitions.values():
        if definition.hooks:
            commands += command_hooks(definition.hooks, definition.source, scope=definition.name)
    if not commands and permissions.hooks is None:
        return None
    policy = CallPolicy.compile(permissions)
    return HookSet(permissions.hooks, commands, str(shared or workspace.root), policy)
