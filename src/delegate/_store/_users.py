"""The users of the HTTP API in the store (table `users`): their tokens are never stored, only
their hashes, checked on every request (a token revoked by any process is refused at once)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from .._errors import UserError
from .._time import iso, utc_now
from ._base import Database
from ._rows import UserRow, decode_user
from ._schema import users_table


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


user_of_token = sa.select(users_table.c.id).where(
    users_table.c.token_hash == sa.bindparam("token_hash"), users_table.c.revoked_at.is_(None)
)
"""The id of the user holding a token (by its hash), unless revoked."""
_name_of_token = sa.select(users_table.c.name).where(
    users_table.c.token_hash == sa.bindparam("token_hash"), users_table.c.revoked_at.is_(None)
)


class Users(Database):
    """The store's users (see the module)."""

    def add_user(self, name: str) -> tuple[str, str]:
        """Create a user of the HTTP API; return `(user_id, token)`. Only the token's hash is kept."""
        name = name.strip()
        if not name:
            raise UserError("a user needs a name: pass a non-empty NAME")
        user_id = uuid.uuid4().hex
        token = secrets.token_urlsafe(32)
        now = iso(utc_now())
        values = {"id": user_id, "name": name, "token_hash": hash_token(token), "created_at": now}
        values["token_created_at"] = now
        try:
            with self.write() as conn:
                conn.execute(users_table.insert().values(values))
        except IntegrityError:
            raise UserError(f"a user named {name!r} already exists: pick another name") from None
        return user_id, token

    def user_for_token(self, token: str) -> str | None:
        """The id of the user holding `token`, or None for an unknown or revoked token."""
        with self.read() as conn:
            return conn.scalar(user_of_token, {"token_hash": hash_token(token)})

    def held_tokens(self, tokens: Collection[str]) -> set[str]:
        """Those of `tokens` that a user still holds (not revoked, not replaced by a new one):
        one read, however many tokens (a server checks the tokens of its open streams with it)."""
        hashes = {hash_token(token): token for token in tokens}
        if not hashes:
            return set()
        query = sa.select(users_table.c.token_hash).where(
            users_table.c.token_hash.in_(list(hashes)), users_table.c.revoked_at.is_(None)
        )
        with self.read() as conn:
            return {hashes[found] for found in conn.scalars(query)}

    def list_users(self) -> list[UserRow]:
        """Every user of the HTTP API, by name (tokens are never stored, only their hashes)."""
        query = sa.select(users_table).order_by(users_table.c.name)
        with self.read() as conn:
            return [decode_user(row) for row in conn.execute(query).mappings()]

    def revoke_user(self, name: str) -> UserRow:
        """Refuse the user's tokens from now on (its runs and batches are kept); raises `UserError`
        for an unknown name. `new_token` gives the user a working token again."""
        now = iso(utc_now())
        # The hash is replaced too, so the old token can never come back.
        values = {"revoked_at": now, "token_hash": hash_token(secrets.token_urlsafe(32))}
        return self._change_user(name, values, keep_revoked=True)

    def new_token(self, name: str) -> tuple[UserRow, str]:
        """A new token for the user (printed once); the old one stops working at once, and a
        revoked user is let in again. Raises `UserError` for an unknown name."""
        token = secrets.token_urlsafe(32)
        values = {"token_hash": hash_token(token), "token_created_at": iso(utc_now()), "revoked_at": None}
        return self._change_user(name, values, keep_revoked=False), token

    def _change_user(self, name: str, values: dict[str, Any], *, keep_revoked: bool) -> UserRow:
        name = name.strip()
        with self.write() as conn:
            query = users_table.update().where(users_table.c.name == name)
            if keep_revoked:  # revoking twice keeps the first time
                values = {**values, "revoked_at": sa.func.coalesce(users_table.c.revoked_at, values["revoked_at"])}
            row = conn.execute(query.values(values).returning(*users_table.c)).mappings().first()
        if row is None:
            raise UserError(f"no user named {name!r}: `delegate users list` shows them")
        return decode_user(row)

    def user_name_for_token(self, token: str) -> str | None:
        """The name of the user holding `token`, or None for an unknown or revoked token."""
        with self.read() as conn:
            return conn.scalar(_name_of_token, {"token_hash": hash_token(token)})
