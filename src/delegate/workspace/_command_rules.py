"""Which commands a subagent type may run: Claude Code's `Bash(...)` rules, enforced.

A definition that lists `Bash(git diff:*)` in `tools` may run only commands that match one of its
rules; `Bash(rm:*)` in `disallowedTools` refuses commands that match it. Three forms, as Claude
Code writes them:

- `git diff:*`: the command's words start with `git diff` (`git diff --stat` matches, `git
  diffx` does not);
- a pattern with `*` elsewhere (`npm run *`): the whole command, words joined by one space,
  matches it, `*` standing for any text;
- anything else (`npm test`): exactly that command.

A command line is checked one simple command at a time: it is cut at `;`, `&`, `|`, `&&`, `||`
and new lines (outside quotes), and each part must be allowed. What cannot be checked is refused
when rules apply: command substitution (`$(...)`, backquotes, `<(...)`), and a command whose
program is a variable or a pattern (`$R`, `${R:-rm}`, `r?`). The rules say what a type is meant
to run; they are not the isolation boundary (a program that is allowed may run others, as `git`
runs hooks; one that is not may be reached by another name, as `env rm` or `/bin/rm`): the
sandbox is.
"""

from __future__ import annotations

import fnmatch
import shlex
from dataclasses import dataclass

__all__ = ["CommandRules", "command_rule_matching"]

_SEPARATORS = frozenset(";&|\n")


@dataclass(frozen=True, slots=True)
class CommandRules:
    """`allow` (empty: every command) and `deny` rules, as written inside `Bash(...)`."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.allow or self.deny)

    def refusal(self, command: str) -> str | None:
        """Why `command` may not run under these rules; None when it may."""
        if not self:
            return None
        try:
            parts = _simple_commands(command)
        except ValueError as exc:
            return f"{exc}, which the command rules of this subagent type cannot check; run plain commands"
        for words in parts:
            shown = " ".join(words)
            if _named_later(words[0]):
                why = "runs a program named by a variable or a pattern, which the command rules cannot check"
                return f"{shown!r} {why}"
            denied = next((rule for rule in self.deny if _matches(rule, words)), None)
            if denied is not None:
                return f"{shown!r} is refused by this subagent type's rule Bash({denied})"
            if self.allow and not any(_matches(rule, words) for rule in self.allow):
                allowed = ", ".join(f"Bash({rule})" for rule in self.allow)
                return f"{shown!r} is not among the commands this subagent type may run: {allowed}"
        return None

    def to_dict(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow), "deny": list(self.deny)}


def command_rule_matching(rules: tuple[str, ...], command: str, *, every: bool) -> str | None:
    """Which of `rules` (written as inside `Bash(...)`) `command` matches, by the matching above:
    with `every`, each of its simple commands must match one (an `allow` rule of the permission
    rules, see `delegate.permissions._rules`), and a command that cannot be checked matches none;
    without, one simple command matching is enough (`ask`, `deny`), and a command that cannot be
    checked matches the first rule (it is asked about or refused, never let through)."""
    if not rules:
        return None
    try:
        parts = _simple_commands(command)
    except ValueError:
        return None if every else rules[0]
    found: str | None = None
    for words in parts:
        if _named_later(words[0]):  # which program runs is known only when the shell runs it
            return None if every else rules[0]
        rule = next((r for r in rules if _matches(r, words)), None)
        if rule is not None and not every:
            return rule
        if rule is None and every:
            return None
        found = found or rule
    return found


def _named_later(program: str) -> bool:
    """Whether the shell decides which program runs (`$R`, `"$R"`, `${R:-rm}`, `x$R`, `r?`,
    `/bin/r*`): no rule can say what it is."""
    return any(c in program for c in "$*?[")


def _matches(rule: str, words: list[str]) -> bool:
    if rule.endswith(":*"):
        prefix = rule[:-2].split()
        return words[: len(prefix)] == prefix
    if "*" in rule:
        return fnmatch.fnmatchcase(" ".join(words), " ".join(rule.split()))
    return words == rule.split()


def _simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of `line`; `ValueError` for what cannot be checked."""
    parts: list[str] = []
    current: list[str] = []
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        ahead = line[i : i + 2]
        if quote != "'" and (char == "`" or ahead == "$("):
            raise ValueError("it uses command substitution ($(...) or backquotes)")
        if not quote and ahead in ("<(", ">("):
            raise ValueError("it uses process substitution (<(...) or >(...))")
        if char == "\\" and quote != "'":
            current.append(line[i : i + 2])
            i += 2
            continue
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in _SEPARATORS and not _redirection(line, i):
            parts.append("".join(current))
            current = []
            i += 1
            continue
        current.append(char)
        i += 1
    if quote:
        raise ValueError("it has an unclosed quote")
    parts.append("".join(current))
    return [words for words in (shlex.split(part) for part in parts) if words]


def _redirection(line: str, i: int) -> bool:
    """Whether the `&` at `i` belongs to a redirection (`2>&1`, `&>log`), not a separator."""
    return line[i] == "&" and ((i > 0 and line[i - 1] in "<>") or line[i + 1 : i + 2] == ">")
