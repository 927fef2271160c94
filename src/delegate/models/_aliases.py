"""Model aliases: the short names Claude Code's agent files use (`sonnet`, `opus`, `haiku`) and full
Claude model ids, resolved to `provider:name` strings through a table users can override.

Later wins: the defaults below < `[aliases]` in `<workspace>/.delegate/models.toml` <
`DELEGATE_MODEL_ALIASES` (`sonnet=openai:gpt-4.1,haiku=openai:gpt-4.1-mini`) < the aliases given to
the `Runtime` (`delegate run --model-alias sonnet=openai:gpt-4.1`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from .._errors import UserError

DEFAULT_ALIASES: dict[str, str] = {
    "sonnet": "anthropic:claude-sonnet-4-5",
    "opus": "anthropic:claude-opus-4-5",
    "haiku": "anthropic:claude-haiku-4-5",
}
ALIASES_ENV = "DELEGATE_MODEL_ALIASES"
ALIASES_FILE = Path(".delegate") / "models.toml"
PROVIDERS = ("openai", "anthropic", "local")
_CLAUDE_ID = re.compile(r"claude-[a-z0-9.-]+")
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ModelAliases:
    """The alias table of one runtime. `resolve` says what a definition's `model` means."""

    def __init__(self, table: Mapping[str, str] | None = None) -> None:
        self.table = dict(DEFAULT_ALIASES if table is None else table)

    @classmethod
    def load(cls, workspace: Path | None = None, overrides: Mapping[str, str] | Sequence[str] = ()) -> ModelAliases:
        """The defaults, then the workspace's file, the environment variable, then `overrides`
        (a mapping, or `alias=model` strings as `--model-alias` takes them). Raises `UserError`
        for a malformed entry, naming where it came from."""
        table = dict(DEFAULT_ALIASES)
        if workspace is not None:
            table |= _from_file(workspace / ALIASES_FILE)
        if os.environ.get(ALIASES_ENV):
            table |= parse_aliases(os.environ[ALIASES_ENV].split(","), ALIASES_ENV)
        if isinstance(overrides, Mapping):
            table |= {alias: _checked(spec, f"model alias {alias!r}") for alias, spec in overrides.items()}
        else:
            table |= parse_aliases(overrides, "--model-alias (model_aliases)")  # the CLI's or the code's
        return cls(table)

    def resolve(self, written: str) -> tuple[str, bool]:
        """`(spec, aliased)`: the model string `written` stands for (`inherit` stays `inherit`),
        and whether it came through the table (then a missing key falls back to the lead's model).
        Raises `UserError` saying what is accepted."""
        value = written.strip()
        if value == "inherit":
            return value, False
        if value in self.table:
            return self.table[value], True
        if _CLAUDE_ID.fullmatch(value):
            return f"anthropic:{value}", True
        provider, _, name = value.partition(":")
        if (provider in ("openai", "anthropic") and name) or value == "local":
            return value, False
        aliases = ", ".join(sorted(self.table))
        raise UserError(
            f"model {written!r} is not a model: use 'inherit', an alias ({aliases}), a Claude model id "
            "(claude-...), or provider:name ('openai:<model>', 'anthropic:<model>', 'local')"
        )


def has_credentials(spec: str) -> bool:
    """Whether the provider of `spec` can be reached with what the environment holds."""
    provider = spec.partition(":")[0]
    if provider == "openai":
        return bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
    if provider == "anthropic":
        return bool(os.environ.get("ANTHROPIC_API_KEY"))
    return True


def credentials_hint(spec: str) -> str:
    return {"openai": "OPENAI_API_KEY or OPENAI_BASE_URL", "anthropic": "ANTHROPIC_API_KEY"}.get(
        spec.partition(":")[0], "credentials"
    )


def parse_aliases(entries: Iterable[str], where: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for entry in entries:
        if not entry.strip():
            continue
        alias, sep, spec = entry.partition("=")
        alias, spec = alias.strip(), spec.strip()
        if not sep or not _ALIAS.fullmatch(alias) or not spec:
            raise UserError(f"{where}: {entry.strip()!r} is not alias=provider:model, e.g. sonnet=openai:gpt-4.1")
        table[alias] = _checked(spec, f"{where}: alias {alias!r}")
    return table


def _from_file(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    import tomllib  # on first use: most workspaces have no aliases file

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{ALIASES_FILE.as_posix()}: cannot read model aliases: {exc}") from None
    aliases: object = data.get("aliases", {})
    if not isinstance(aliases, dict):
        raise UserError(f'{ALIASES_FILE.as_posix()}: expected an [aliases] table, e.g. sonnet = "openai:gpt-4.1"')
    table: dict[str, str] = {}
    for alias, spec in cast(dict[str, Any], aliases).items():
        if not isinstance(spec, str):
            raise UserError(f"{ALIASES_FILE.as_posix()}: alias {alias!r} must be a model string")
        table[alias] = _checked(spec, f"{ALIASES_FILE.as_posix()}: alias {alias!r}")
    return table


def _checked(spec: str, where: str) -> str:
    provider, _, name = spec.partition(":")
    if not ((provider in ("openai", "anthropic") and name) or spec == "local"):
        raise UserError(f"{where}: {spec!r} is not provider:name ('openai:<model>', 'anthropic:<model>', 'local')")
    return spec
