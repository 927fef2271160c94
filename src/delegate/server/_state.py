"""What one app holds, typed: the `AppState` that `create_app` builds and every route reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from .._config import RunLimits
    from .._store import Store
    from ..agents import Catalogue
    from ..eval import Evals
    from ..run import Takeover
    from ..skills import SkillCatalogue
    from ..workspace import Workspace
    from ._auth import TokenWatch
    from ._batches import BatchService
    from ._limits import Limits
    from ._runs import RunManager


@dataclass(frozen=True, kw_only=True)
class AppState:
    """One app's state: nothing is shared between two apps.

    `catalogue` gives a user's subagent catalogue, `skills` its skills (enabled or not),
    `workspace_for` the view of a user's files;
    `tokens` watches the tokens of open event streams;
    `takeover` resumes the interrupted runs of servers that died; `limits` is what one client may
    cost, `run_limits` what a run may spend unless its request names other limits.
    """

    store: Store
    runs: RunManager
    takeover: Takeover
    batches: BatchService
    tokens: TokenWatch
    catalogue: Callable[[str | None], Catalogue]
    skills: Callable[[str | None], SkillCatalogue]
    workspace_for: Callable[[str | None], Workspace]
    allow_commands: bool
    limits: Limits
    run_limits: RunLimits
    evals: Evals


def app_state(app: Starlette) -> AppState:
    """The state `create_app` gave `app`."""
    return cast("AppState", app.state.delegate)
