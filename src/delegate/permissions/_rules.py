"""Permission rules in Claude Code's format: which calls run, which wait for a person, which are refused.

Rules come in three lists, `allow`, `ask` and `deny`, each rule a tool name with an optional
pattern in parentheses, as Claude Code writes them:

- `Bash`, `Write`, `Edit`, `Read`, `Grep`, `Glob`, `LS` (Claude's names) or our own tool names
  (`bash`, `write_file`, `edit_file`, ...): every call of that tool. `Edit` covers every tool that
  changes files (`edit_file` and `write_file`), `Read` every tool that reads them (`read_file`,
  `grep`, `find_files`, `list_dir`), as in Claude Code.
- `Bash(npm run test:*)`: commands, matched by the `Bash(...)` rules of `_command_rules.py`.
- `Edit(docs/**)`, `Read(*.env)`: the file the call names, a gitignore-style pattern relative to
  the workspace (`**` any folders, `*` any name part; a pattern without `/` matches at any depth).
- `mcp__server__tool`, `mcp__server` or `mcp__server__*`: an MCP server's tool, or all of its tools.
- Any other tool with a pattern: the pattern matches one of the call's text arguments.

Precedence: `deny` wins over `ask`, `ask` over `allow`. A tool a `deny` rule names whole (no
pattern) is not offered at all. A call no rule names runs, unless the agent's permission mode
says otherwise (`PermissionMode`, Claude Code's modes): `acceptEdits` lets file edits under an
`ask` rule run, `bypassPermissions` lets every `ask` call run (a `deny` still refuses), `dontAsk`
refuses what it would ask and every call that changes something and no `allow` rule names,
`plan` offers only the tools that read.

Where rules come from: `Permissions` in `Extensions.permissions` (the command line's `--allow`,
`--ask`, `--deny`), and the `permissions` of `.claude/settings.json`,
`.claude/settings.local.json` and `.delegate/settings.json` in the operator's folder (the
workspace, or under `delegate serve` the operator's folder, never a user's). All are merged.
The rules are compiled once a run (`CallPolicy`): a tool no rule names is not touched, so a call
of it costs nothing more.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from .._empty import empty_dict
from .._errors import UserError
from ..workspace._command_rules import command_rule_matching

__all__ = [
    "PERMISSION_MODES",
    "CallPolicy",
    "PermissionMode",
    "Permissions",
    "Rule",
    "RuleKind",
    "Verdict",
    "path_argument",
    "read_settings",
]

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]
PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)
RuleKind = Literal["allow", "ask", "deny"]

SETTINGS_FILES = (".claude/settings.json", ".claude/settings.local.json", ".delegate/settings.json")
"""The settings files of the operator's folder, read in this order (their rules and hooks merged)."""

CLAUDE_NAMES: dict[str, tuple[str, ...]] = {
    "Bash": ("bash",),
    "Write": ("write_file",),
    "Edit": ("edit_file", "write_file"),
    "MultiEdit": ("edit_file",),
    "Read": ("read_file", "grep", "find_files", "list_dir"),
    "Grep": ("grep",),
    "Glob": ("find_files",),
    "LS": ("list_dir",),
}
"""Claude Code's tool names in rules, and the tools of ours each covers."""

READS = frozenset({"read_file", "grep", "find_files", "list_dir", "tool_search", "complete", "list_uploaded_files"})
"""Tools that change nothing: what `plan` offers, and what `dontAsk` lets run without an `allow` rule."""
EDITS = frozenset({"write_file", "edit_file"})
"""Tools that change files: what `acceptEdits` lets run under an `ask` rule."""
NEVER_WITHHELD = frozenset({"complete"})
"""Tools no rule takes away: a subagent without `complete` could never end."""
_PATH_ARGUMENTS = ("path", "file_path")
_PATH_TOOLS = frozenset({*CLAUDE_NAMES["Read"], *EDITS})
"""Tools whose rules' patterns match the file a call names."""
_RULE = re.compile(r"\s*([A-Za-z0-9_.*-]+)\s*(?:\((.*)\))?\s*", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule as written (`text`), the tool names it covers (`tools`; or every tool whose name
    starts with `prefix`), and its pattern (`pattern`; None: every call)."""

    text: str
    tools: frozenset[str]
    prefix: str | None
    pattern: str | None
    glob: re.Pattern[str] | None = None
    """The pattern as a regular expression (for the tools that take it so)."""

    @classmethod
    def parse(cls, text: str) -> Rule:
        """A rule from its text; `UserError` saying how to write one when it cannot be read."""
        match = _RULE.fullmatch(text)
        if match is None or not text.strip():
            raise UserError(
                f"permission rule {text!r} cannot be read: write a tool name, optionally with a pattern, "
                "e.g. Write, Bash(npm run test:*), Edit(docs/**), mcp__server__tool or write_file"
            )
        name, pattern = match.group(1), match.group(2)
        pattern = None if pattern is None or pattern.strip() in ("", "*") else pattern.strip()
        if name.startswith("mcp__") and (name.count("__") == 1 or name.endswith("__*")):
            server = name.removesuffix("__*").removesuffix("__")
            return cls(text.strip(), frozenset(), f"{server}__", pattern, _glob(pattern) if pattern else None)
        tools = frozenset(CLAUDE_NAMES.get(name, (name,)))
        return cls(text.strip(), tools, None, pattern, _glob(pattern) if pattern and "bash" not in tools else None)

    def names(self, tool: str) -> bool:
        return tool in self.tools or (self.prefix is not None and tool.startswith(self.prefix))

    def matches(self, tool: str, arguments: Mapping[str, Any], *, every: bool = False) -> bool:
        """Whether a call of `tool` (one this rule names) with `arguments` falls under the rule;
        `every`: an `allow` rule of a command must cover each of its simple commands."""
        pattern, glob = self.pattern, self.glob
        if pattern is None:
            return True
        if tool == "bash":
            command = arguments.get("command")
            return isinstance(command, str) and command_rule_matching((pattern,), command, every=every) is not None
        if tool in _PATH_TOOLS:
            key = path_argument(tool, arguments)
            return key is not None and glob is not None and glob.fullmatch(_relative(arguments[key])) is not None
        return glob is not None and any(isinstance(v, str) and glob.fullmatch(v) for v in arguments.values())


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the rules say of one call: `kind`, the rule that decided (`rule`; None: the mode did),
    and `reason`, what the model is told when the call is refused."""

    kind: RuleKind
    rule: str | None
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Permissions:
    """Permission rules (see the module's docstring) and the permission mode of agents whose
    definition sets none (None: `default`). `settings_files`: also read the `permissions` (and
    `hooks`) of the operator's settings files. `hooks` are Python hooks (`delegate.Hooks`)."""

    allow: Sequence[str] = ()
    ask: Sequence[str] = ()
    deny: Sequence[str] = ()
    mode: PermissionMode | None = None
    settings_files: bool = True
    hooks: Any = None
    """A `delegate.Hooks` (Python hooks that can act on calls and subagents), or None."""

    def __post_init__(self) -> None:
        for kind in ("allow", "ask", "deny"):
            value = getattr(self, kind)
            if isinstance(value, str):
                raise UserError(f"Permissions {kind} is a list of rules, not one: write {kind}=[{value!r}]")
            object.__setattr__(self, kind, tuple(value))
            for text in value:
                Rule.parse(text)
        if self.mode is not None and self.mode not in PERMISSION_MODES:
            raise UserError(f"permission mode {self.mode!r} is not one of {', '.join(PERMISSION_MODES)}")

    def __bool__(self) -> bool:
        return bool(self.allow or self.ask or self.deny or self.mode not in (None, "default") or self.hooks)

    def merged(self, other: Permissions) -> Permissions:
        """These rules and `other`'s together (`other`'s mode when it sets one)."""
        return Permissions(
            allow=(*self.allow, *other.allow),
            ask=(*self.ask, *other.ask),
            deny=(*self.deny, *other.deny),
            mode=other.mode or self.mode,
            settings_files=self.settings_files,
            hooks=self.hooks or other.hooks,
        )

    def to_dict(self) -> dict[str, Any]:
        return {"allow": list(self.allow), "ask": list(self.ask), "deny": list(self.deny), "mode": self.mode}


def read_settings(folder: Path) -> tuple[Permissions, list[dict[str, Any]]]:
    """The `permissions` of the settings files in `folder` (the operator's), merged, and the
    `hooks` entries of each (Claude Code's format), with the file they came from. A file that is
    not JSON, or a rule that cannot be read, is a `UserError` naming the file."""
    found = Permissions(settings_files=False)
    hooks: list[dict[str, Any]] = []
    for name in SETTINGS_FILES:
        path = folder / name
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{name}: cannot be read ({exc}); fix or remove it") from None
        try:
            data: object = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise UserError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno}); fix or remove it") from None
        if not isinstance(data, dict):
            raise UserError(f'{name}: must be a JSON object such as {{"permissions": {{"deny": ["Write"]}}}}')
        settings = cast(dict[str, Any], data)
        found = found.merged(_permissions_of(settings.get("permissions"), name))
        if settings.get("hooks") is not None:
            hooks.append({"file": name, "hooks": settings["hooks"]})
    return found, hooks


def _permissions_of(value: object, name: str) -> Permissions:
    if value is None:
        return Permissions(settings_files=False)
    if not isinstance(value, dict):
        raise UserError(f'{name}: "permissions" must be an object with "allow", "ask" and "deny" lists')
    given = cast(dict[str, Any], value)
    lists: dict[str, tuple[str, ...]] = {}
    for kind in ("allow", "ask", "deny"):
        rules = given.get(kind, [])
        if not isinstance(rules, list) or not all(isinstance(r, str) for r in cast(list[Any], rules)):
            raise UserError(f'{name}: "permissions.{kind}" must be a list of rules such as ["Bash(npm test:*)"]')
        lists[kind] = tuple(cast(list[str], rules))
    mode = given.get("defaultMode")
    if mode is not None and mode not in PERMISSION_MODES:
        raise UserError(f'{name}: "permissions.defaultMode" {mode!r} is not one of {", ".join(PERMISSION_MODES)}')
    try:
        return Permissions(**lists, mode=mode, settings_files=False)
    except UserError as exc:
        raise UserError(f"{name}: {exc}") from None


@dataclass(slots=True)
class CallPolicy:
    """The rules of one run, compiled: what each agent is offered and what each call may do.

    Built once a run; `for_mode` gives the policy of agents of one permission mode (each cached).
    `named(tool)` is False for a tool no rule or mode touches: such a tool is not wrapped at all.
    """

    permissions: Permissions
    mode: PermissionMode = "default"
    allow: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    _named: dict[str, bool] = field(default_factory=empty_dict)
    _offered: dict[str, bool] = field(default_factory=empty_dict)
    _by_tool: dict[str, tuple[tuple[Rule, ...], tuple[Rule, ...], tuple[Rule, ...]]] = field(default_factory=empty_dict)
    """The deny, ask and allow rules that name each tool, found on its first call."""
    _modes: dict[str, CallPolicy] = field(default_factory=empty_dict)

    @classmethod
    def compile(cls, permissions: Permissions) -> CallPolicy:
        return cls(
            permissions,
            permissions.mode or "default",
            tuple(map(Rule.parse, permissions.allow)),
            tuple(map(Rule.parse, permissions.ask)),
            tuple(map(Rule.parse, permissions.deny)),
        )

    def for_mode(self, mode: str | None) -> CallPolicy:
        """The policy of an agent whose definition sets permission `mode` (None: the run's)."""
        if mode is None or mode == self.mode:
            return self
        found = self._modes.get(mode)
        if found is None:
            found = CallPolicy(self.permissions, cast(PermissionMode, mode), self.allow, self.ask, self.deny)
            self._modes[mode] = found
        return found

    def named(self, tool: str) -> bool:
        """Whether any rule (or the mode) may act on calls of `tool`."""
        found = self._named.get(tool)
        if found is None:
            found = self.mode in ("dontAsk", "plan") or any(r.names(tool) for r in (*self.allow, *self.ask, *self.deny))
            self._named[tool] = found
        return found

    def offered(self, tool: str) -> bool:
        """Whether an agent is offered `tool`: not when a `deny` rule names it whole (or the mode
        is `plan` and it changes something)."""
        found = self._offered.get(tool)
        if found is None:
            found = self._offered[tool] = (
                tool in NEVER_WITHHELD
                or not self.named(tool)
                or (
                    not (self.mode == "plan" and tool not in READS and tool != "task")
                    and not any(r.pattern is None and r.names(tool) for r in self.deny)
                )
            )
        return found

    def rules_of(self, tool: str) -> dict[str, list[str]]:
        """The rules that name `tool`, by kind (what `delegate agents show` prints)."""
        return {
            kind: [r.text for r in rules if r.names(tool)]
            for kind, rules in (("allow", self.allow), ("ask", self.ask), ("deny", self.deny))
        }

    def verdict(self, tool: str, arguments: Mapping[str, Any]) -> Verdict:
        """What the rules and the mode say of a call of `tool` with `arguments`."""
        rules = self._by_tool.get(tool)
        if rules is None:
            named = [tuple(r for r in kind if r.names(tool)) for kind in (self.deny, self.ask, self.allow)]
            rules = self._by_tool[tool] = (named[0], named[1], named[2])
        deny, ask, allow = rules
        denied = _first(deny, tool, arguments)
        if denied is not None:
            return Verdict("deny", denied.text, f"{tool} is refused by the permission rule deny {denied.text!r}")
        asked = _first(ask, tool, arguments)
        mode = self.mode
        if asked is not None:
            if mode == "bypassPermissions" or (mode == "acceptEdits" and tool in EDITS):
                return Verdict("allow", asked.text, "")
            if mode == "dontAsk":
                return Verdict(
                    "deny",
                    asked.text,
                    f"{tool} needs a person's approval (rule ask {asked.text!r}) and this agent "
                    "never asks (permission mode dontAsk)",
                )
            return Verdict("ask", asked.text, f"{tool} needs a person's approval (rule ask {asked.text!r})")
        allowed = _first(allow, tool, arguments, every=True)
        if allowed is not None:
            return Verdict("allow", allowed.text, "")
        if mode == "dontAsk" and tool not in READS:
            return Verdict("deny", None, f"{tool} is not allowed by any permission rule (permission mode dontAsk)")
        if mode == "plan" and tool not in READS and tool != "task":
            return Verdict("deny", None, f"{tool} changes things, and this agent only plans (permission mode plan)")
        return Verdict("allow", None, "")


def _first(rules: tuple[Rule, ...], tool: str, arguments: Mapping[str, Any], *, every: bool = False) -> Rule | None:
    for rule in rules:  # each names `tool` (see `CallPolicy.verdict`)
        if rule.matches(tool, arguments, every=every):
            return rule
    return None


def path_argument(tool: str, arguments: Mapping[str, Any]) -> str | None:
    """The argument of a call of `tool` that names the file its path rules judge (None: it has none).
    The caller judges where that path lands (`tools.CallGuard`), not how the model spelled it."""
    if tool not in _PATH_TOOLS:
        return None
    return next((k for k in _PATH_ARGUMENTS if isinstance(arguments.get(k), str)), None)


def _relative(path: str) -> str:
    """A path argument as rules match it: relative to the workspace, `.` and `..` folded."""
    if "/." not in path and "//" not in path and "\\" not in path and not path.startswith("."):
        return path.lstrip("/")  # nothing to fold (most paths): no normpath
    normal = posixpath.normpath(path.replace("\\", "/"))
    return normal.lstrip("/").removeprefix("./")


def _glob(pattern: str) -> re.Pattern[str]:
    """A gitignore-style pattern as a regular expression over a relative path."""
    text = pattern.strip()
    if text.startswith("./"):
        text = text[2:]
    anchored = "/" in text.rstrip("/")
    text = text.lstrip("/")
    if text.endswith("/"):
        text += "**"
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif text.startswith("**", i):
            out.append(".*")
            i += 2
        elif text[i] == "*":
            out.append("[^/]*")
            i += 1
        elif text[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(text[i]))
            i += 1
    body = "".join(out)
    return re.compile(body if anchored else f"(?:.*/)?{body}", re.DOTALL)
