"""Which skills are enabled, per user: the operator's defaults (`delegate skills enable|disable`),
and each user's own choices over them (`delegate skills ... --user NAME`, `PUT /api/v1/skills/NAME`,
the page). A skill nobody chose for is enabled.

A choice is kept by the skill's name, so it holds for whichever skill has that name where the user
works: a user's own skill that shadows the operator's of the same name is enabled or disabled as
that name is. A run sees only the enabled skills (its index, its mounts, `/name`), and a subagent
the enabled ones its `skills` allowlist permits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .._errors import UserError
from .._store import Migration, Store
from .._time import iso, utc_now
from ..agents import NAME
from ._catalogue import SkillCatalogue

OPERATOR = ""
"""The `user_id` of the operator's defaults (no user's id is empty)."""


def _settings_table(metadata: sa.MetaData) -> sa.Table:
    """The schema `skills.0001_settings` builds (frozen: a change is a new migration)."""
    return sa.Table(
        "skill_settings",
        metadata,
        sa.Column("user_id", sa.Text, primary_key=True),
        sa.Column("skill", sa.Text, primary_key=True),
        sa.Column("enabled", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Text, nullable=False),
    )


SETTINGS = _settings_table(sa.MetaData())


def _m0001_settings(conn: Connection) -> None:
    _settings_table(sa.MetaData()).create(conn)


SKILL_MIGRATIONS: tuple[Migration, ...] = (Migration("skills.0001_settings", _m0001_settings),)


class SkillSettings:
    """The choices in a `Store`. `user_id` None (or `OPERATOR`) is the operator's defaults."""

    def __init__(self, store: Store, *, migrate: bool = True) -> None:
        self.store = store
        if migrate:
            store.migrate(SKILL_MIGRATIONS)

    def choose(self, user_id: str | None, name: str, enabled: bool) -> None:
        """Enable or disable the skill `name` for `user_id` (None: the operator's default)."""
        if not NAME.fullmatch(name):
            raise UserError(f"{name!r} is no skill name: letters, digits, '-', '_' and '.'")
        key = (SETTINGS.c.user_id == (user_id or OPERATOR), SETTINGS.c.skill == name)
        values = {"enabled": int(enabled), "updated_at": iso(utc_now())}
        with self.store.write() as conn:
            if conn.execute(SETTINGS.update().where(*key).values(values)).rowcount:
                return
            try:
                with conn.begin_nested():
                    conn.execute(SETTINGS.insert().values(user_id=user_id or OPERATOR, skill=name, **values))
            except IntegrityError:  # another writer made the row first (PostgreSQL): ours is the latest
                conn.execute(SETTINGS.update().where(*key).values(values))

    def clear(self, user_id: str | None, name: str) -> bool:
        """Forget `user_id`'s choice for `name` (it follows the operator's default again);
        False when it had none."""
        key = (SETTINGS.c.user_id == (user_id or OPERATOR), SETTINGS.c.skill == name)
        with self.store.write() as conn:
            return bool(conn.execute(SETTINGS.delete().where(*key)).rowcount)

    def choices(self, user_id: str | None) -> tuple[dict[str, bool], dict[str, bool]]:
        """The operator's defaults and `user_id`'s own choices, by skill name."""
        who = [OPERATOR] if not user_id else [OPERATOR, user_id]
        query = sa.select(SETTINGS.c.user_id, SETTINGS.c.skill, SETTINGS.c.enabled).where(SETTINGS.c.user_id.in_(who))
        defaults: dict[str, bool] = {}
        own: dict[str, bool] = {}
        with self.store.read() as conn:
            for user, skill, enabled in conn.execute(query).all():
                (defaults if user == OPERATOR else own)[skill] = bool(enabled)
        return defaults, own

    def disabled(self, user_id: str | None) -> frozenset[str]:
        """The names `user_id` has disabled: its own choice, else the operator's default."""
        defaults, own = self.choices(user_id)
        merged = defaults | own
        return frozenset(name for name, enabled in merged.items() if not enabled)

    def listing(self, user_id: str | None, catalogue: SkillCatalogue) -> list[dict[str, Any]]:
        """Every skill of `catalogue` (built without choices: all of them) as `delegate skills
        list --json` and `GET /api/v1/skills` show it: `enabled` (what runs see), `default` (the
        operator's) and `choice` (the user's own, None: none)."""
        defaults, own = self.choices(user_id)
        return [row(skill.name, skill.description, skill.path, defaults, own) for skill in catalogue.skills.values()]

    @staticmethod
    def known(catalogue: SkillCatalogue, name: str) -> None:
        """`UserError` unless `catalogue` has a skill `name` (listing the names it has)."""
        if name not in catalogue.skills:
            names: Iterable[str] = sorted(catalogue.skills)
            raise UserError(f"no skill {name!r} here; the skills are: {', '.join(names) or 'none'}")


def row(name: str, description: str, path: str, defaults: dict[str, bool], own: dict[str, bool]) -> dict[str, Any]:
    default = defaults.get(name, True)
    choice = own.get(name)
    enabled = default if choice is None else choice
    return {
        "name": name,
        "description": description,
        "path": path,
        "enabled": enabled,
        "default": default,
        "choice": choice,
    }
