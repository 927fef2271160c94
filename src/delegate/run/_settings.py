"""`RuntimeSettings`: what the operator configured, and the one place a `Runtime` is built from it.

`delegate run`, `delegate batch submit|worker`, `delegate agents list` and `delegate serve` all
build their runtimes and catalogues here, so a flag (`--skills`, `--mcp-config`, the command
policy) means the same everywhere.

Where a user's agents work: the local user (`delegate run`, the batch CLI: user `default`, or
none) works in the workspace itself. Any other user (an HTTP user of `delegate serve`) works in a
folder of its own, `<workspace>/.delegate/users/<user id>/`, created on first use. Its agents see
that folder as their whole workspace: the server's store, `.delegate/` and other users' folders
are not in it. Definitions then come from the operator's folders first (the workspace's
`.claude/` and `.delegate/` agents and skills, `--agents`, `--skills`), shadowed by name by the
user's own (the same folders inside the user's workspace), which its agents can read but not
change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from .._config import LOCAL_USER, Extensions, LoopSettings, RunLimits
from ..agents import Catalogue, Lead, Subagent
from ..engine import EngineSettings
from ..models import Model, ModelAliases
from ..skills import SkillCatalogue
from ..workspace import CommandPolicy, Workspace

if TYPE_CHECKING:
    from .._store import Store
    from ._runtime import Runtime

USERS_FOLDER = Path(".delegate") / "users"
"""Where, under the workspace, each other user's own workspace is."""


@dataclass(frozen=True, kw_only=True)
class RuntimeSettings:
    """The operator's settings of runtimes, each one object passed whole to every runtime built.

    `model` is the default model (a request or a batch may name another). `lead` is the lead's
    definition and `subagents` the types given in code (the demo's). `limits`, `loop` and
    `extensions` are every run's (see `delegate._config`). `commands` lets agents run shell
    commands under that policy (None: no commands). `engine` is where the work executes: embedded
    (in this process, the default) or on Temporal (see `delegate.engine`).
    """

    workspace: str | PathLike[str] = "."
    model: str | Model | None = None
    lead: Lead = field(default_factory=Lead)
    subagents: Sequence[Subagent] = ()
    limits: RunLimits = field(default_factory=RunLimits)
    loop: LoopSettings = field(default_factory=LoopSettings)
    extensions: Extensions = field(default_factory=Extensions)
    commands: CommandPolicy | None = None
    engine: EngineSettings = field(default_factory=EngineSettings)

    @property
    def root(self) -> Path:
        return Path(self.workspace).expanduser().resolve()

    @property
    def allow_commands(self) -> bool:
        return self.commands is not None

    def user_root(self, user_id: str | None) -> Path | None:
        """The folder of a user's own workspace; None for the local user (the workspace itself)."""
        if user_id is None or user_id == LOCAL_USER:
            return None
        if not user_id.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"user id {user_id!r} cannot name a folder")
        return self.root / USERS_FOLDER / user_id

    def workspace_view(self, user_id: str | None) -> Workspace:
        """The view of the files a user's agents work in (without the skills a run mounts): what
        the server lets that user read back, such as the files its subagents delivered."""
        root = self.user_root(user_id) or self.root
        return Workspace(root=root, commands=self.commands or CommandPolicy(), outputs=Path(self.extensions.outputs))

    def catalogue(self, user_id: str | None = None) -> Catalogue:
        """The subagent types a user's runs can start (the operator's, shadowed by the user's own),
        with the warnings of every definition and skill file read."""
        own = self.user_root(user_id)
        ext = self.extensions
        found = Catalogue.build(
            workspace=self.root,
            agent_dirs=[Path(d) for d in ext.agents_dirs],
            own=own,
            subagents=self.subagents,
            builtins=ext.builtin_subagents,
            aliases=ModelAliases.load(self.root, ext.model_aliases),
            user=user_level(ext),
        )
        return found.with_warnings(self.skills(user_id).warnings)

    def skills(self, user_id: str | None = None) -> SkillCatalogue:
        """A user's skills (the operator's, shadowed by the user's own), each whether enabled or
        not (`delegate skills list`, `GET /skills`), with the warnings of the files read."""
        ext = self.extensions
        dirs = [Path(d) for d in ext.skills_dirs]
        return SkillCatalogue.build(self.root, dirs=dirs, own=self.user_root(user_id), user=user_level(ext))

    def build(
        self, *, user_id: str | None = None, model: str | Model | None = None, store: Store | str | bool | None = None
    ) -> Runtime:
        """A runtime for `user_id`'s runs, in that user's workspace (created if missing)."""
        from ._runtime import Runtime

        own = self.user_root(user_id)
        return Runtime(
            model=model or self.model,
            workspace=own or self.root,
            lead=self.lead,
            subagents=self.subagents,
            limits=self.limits,
            loop=self.loop,
            extensions=replace(self.extensions, shared=self.root) if own is not None else self.extensions,
            commands=self.commands,
            store=store,
            user_id=user_id,
        )

    def factory(self, store: Store | str | bool | None = None) -> RuntimeFactory:
        """`build` as the one `RuntimeFactory` of every face, its runtimes recording into `store`."""

        def build(user_id: str | None, model: str | None) -> Runtime:
            return self.build(user_id=user_id, model=model, store=store)

        return build


RuntimeFactory = Callable[[str | None, str | None], "Runtime"]
"""Builds the `Runtime` of a user's runs, or of a batch's items: called with the user id (None:
the local user) and the model string they name (None: the default). Raises `UserError` for a bad
model or setting. What `delegate serve`, `delegate batch worker` and the takeover of interrupted
runs each build their runtimes with."""


def user_level(extensions: Extensions) -> Path | None:
    """The operator's user-level folder (`~/.claude`) of these extensions, if any."""
    return None if extensions.user_level is None else Path(extensions.user_level).expanduser()
