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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from ._agents import Catalogue, Subagent
from ._guard import LoopGuard
from ._loop import DEFAULT_GUARD
from ._workspace import CommandPolicy, Workspace
from .mcp import MCPServerConfig
from .models import Model, ModelAliases
from .skills import SkillCatalogue

if TYPE_CHECKING:
    from ._runtime import Runtime
    from ._store import Store

LOCAL_USER = "default"
"""The user of the command line: it works in the workspace itself."""
USERS_FOLDER = Path(".delegate") / "users"
"""Where, under the workspace, each other user's own workspace is."""


@dataclass(kw_only=True)
class RuntimeSettings:
    """The operator's settings of runtimes: the workspace, definitions, tools and command policy.

    `model` is the default model (a request or a batch may name another). `subagents` are
    definitions given in code (the demo's).
    """

    workspace: str | PathLike[str] = "."
    model: str | Model | None = None
    subagent_model: str | None = None
    model_aliases: Sequence[str] = ()
    """`alias=provider:model` entries over `DELEGATE_MODEL_ALIASES` and `.delegate/models.toml`."""
    agents_dirs: Sequence[str | PathLike[str]] = ()
    skills_dirs: Sequence[str | PathLike[str]] = ()
    mcp_servers: Sequence[MCPServerConfig] = ()
    allow_commands: bool = False
    commands: CommandPolicy = field(default_factory=CommandPolicy)
    max_parallel: int | None = 16
    max_steps: int = 50
    context_window: int | None = None
    """Tokens every model reads at once, over what each model says (`--context-window`)."""
    loop_guard: LoopGuard | None = DEFAULT_GUARD
    """When an agent going round in circles is ended (`--max-repeated-failures`, `--max-idle-steps`)."""
    subagents: Iterable[Subagent] = ()

    @property
    def root(self) -> Path:
        return Path(self.workspace).expanduser().resolve()

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
        return Workspace(root=self.user_root(user_id) or self.root, commands=self.commands)

    def catalogue(self, user_id: str | None = None) -> Catalogue:
        """The subagent types a user's runs can start (the operator's, shadowed by the user's own),
        with the warnings of every definition and skill file read."""
        own = self.user_root(user_id)
        found = Catalogue.build(
            workspace=self.root,
            agent_dirs=[Path(d) for d in self.agents_dirs],
            own=own,
            subagents=self.subagents,
            aliases=ModelAliases.load(self.root, self.model_aliases),
        )
        skills = SkillCatalogue.build(self.root, dirs=[Path(d) for d in self.skills_dirs], own=own)
        return found.with_warnings(skills.warnings)

    def build(
        self,
        *,
        user_id: str | None = None,
        model: str | Model | None = None,
        max_parallel: int | None = None,
        store: Store | str | bool | None = None,
    ) -> Runtime:
        """A runtime for `user_id`'s runs, in that user's workspace (created if missing)."""
        from ._runtime import Runtime

        own = self.user_root(user_id)
        if own is not None:
            own.mkdir(parents=True, exist_ok=True)
        return Runtime(
            model=model or self.model,
            workspace=own or self.root,
            shared=self.root if own is not None else None,
            subagents=self.subagents,
            agents_dirs=self.agents_dirs,
            skills_dirs=self.skills_dirs,
            mcp_servers=self.mcp_servers,
            allow_commands=self.allow_commands,
            commands=self.commands,
            subagent_model=self.subagent_model,
            model_aliases=self.model_aliases,
            max_parallel=max_parallel or self.max_parallel,
            max_steps=self.max_steps,
            context_window=self.context_window,
            loop_guard=self.loop_guard,
            store=store,
            user_id=user_id,
        )
