"""Arms: the run configurations an evaluation compares (see docs/eval.md).

An arm is a name and options. On the command line, `--arm NAME=OPTIONS` with OPTIONS words and
`key=value` pairs separated by commas or spaces (`--arm solo=single`, `--arm team=delegation,
model=openai:gpt-4.1`); in a suite file, `arms: {NAME: {mode: single, model: ...}}`.

```
single | delegation | workflow=NAME|FILE   the mode: one agent with no task tool (nor batches or workflows);
                                          the lead delegating as today (the default); a workflow
                                          script run instead of the lead (a shipped one's name, or a file)
model=M, subagent_model=M                 the lead's model; the model of subagents that inherit it
agents=DIR                                another folder of subagent definitions (repeatable)
max_steps=N                               the lead's step limit
token_budget=N, cost_budget=USD,          this arm's run limits (`--equal-budget` sets the budget of
timeout=S, max_parallel=N                 every arm alike)
```
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, cast

from .._config import Extensions, RunLimits
from .._errors import UserError
from ..agents import Lead
from ..tools import BUILTIN_TOOLS
from ..workflows import Workflow, shipped_workflows

__all__ = ["Arm", "Mode", "default_arms", "parse_arm_option"]

Mode = Literal["single", "delegation", "workflow"]
MODES: tuple[Mode, ...] = ("single", "delegation", "workflow")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_INTS = ("max_steps", "token_budget", "max_parallel")
_FLOATS = ("cost_budget", "timeout")
_TEXTS = ("model", "subagent_model")


@dataclass(frozen=True, kw_only=True)
class Arm:
    """One run configuration: see the module's docstring. `workflow` holds the script itself
    (read when the eval is made), so a resume runs what the first attempts ran."""

    name: str
    mode: Mode = "delegation"
    workflow: str | None = None
    workflow_name: str | None = None
    model: str | None = None
    subagent_model: str | None = None
    agents: tuple[str, ...] = ()
    max_steps: int | None = None
    token_budget: int | None = None
    cost_budget: float | None = None
    timeout: float | None = None
    max_parallel: int | None = None

    def lead(self, base: Lead) -> Lead:
        """The lead of this arm's runs, from the operator's: with no delegation tools in `single`."""
        lead = replace(base, tools=list(BUILTIN_TOOLS)) if self.mode == "single" else base
        if self.subagent_model is not None:
            lead = replace(lead, subagent_model=self.subagent_model)
        if self.max_steps is not None:
            lead = replace(lead, max_steps=self.max_steps)
        return lead

    def limits(self, base: RunLimits) -> RunLimits:
        """This arm's run limits over the operator's."""
        own = {name: getattr(self, name) for name in ("token_budget", "cost_budget", "timeout", "max_parallel")}
        return base.over({k: v for k, v in own.items() if v is not None})

    def extensions(self, base: Extensions) -> Extensions:
        """The operator's extensions, with this arm's definition folders after theirs."""
        return replace(base, agents_dirs=(*base.agents_dirs, *self.agents)) if self.agents else base

    def plan(self, prompt: str, args: Mapping[str, Any]) -> Workflow | None:
        """The workflow a `workflow` arm runs for a task (its args: the task's, and `prompt`)."""
        if self.mode != "workflow" or self.workflow is None:
            return None
        return Workflow(script=self.workflow, description=prompt, args={**args, "prompt": prompt})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"agents": list(self.agents)}

    def describe(self) -> str:
        """The arm's options in the `--arm` syntax, as the report shows them."""
        words: list[str] = [self.mode if self.mode != "workflow" else f"workflow={self.workflow_name}"]
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("name", "mode", "workflow", "workflow_name") or value in (None, ()):
                continue
            words += [f"agents={a}" for a in value] if f.name == "agents" else [f"{f.name}={value}"]
        return ",".join(words)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Arm:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["agents"] = tuple(values.get("agents") or ())
        return cls(**values)

    @classmethod
    def parse(cls, name: str, options: object, base: Path) -> Arm:
        """An arm from its options (a mapping, or the `--arm` text); `base` is the folder relative
        paths (a workflow file, `agents`) are read from. `UserError` says what is wrong."""
        if not _NAME.match(name):
            raise UserError(f"arm name {name!r}: 1-32 letters, digits, '.', '_' or '-'")
        if isinstance(options, str):
            options = _words(options, name)
        if options is None:
            options = {}
        if not isinstance(options, dict):
            raise UserError(f"arm {name}: its options are a mapping (mode, model, ...)")
        given = dict(cast("dict[str, Any]", options))
        if "workflow" in given:
            given.setdefault("mode", "workflow")
        mode = given.pop("mode", "delegation")
        if mode not in MODES:
            raise UserError(f"arm {name}: mode {mode!r}; use single, delegation or workflow=NAME|FILE")
        values: dict[str, Any] = {"name": name, "mode": mode}
        if mode == "workflow":
            values.update(_workflow(given.pop("workflow", None), base, name))
        agents = given.pop("agents", ())
        agents = [agents] if isinstance(agents, str) else cast("list[Any]", agents)
        values["agents"] = tuple(str((base / str(a)).resolve()) for a in agents)
        for key, value in given.items():
            values[key] = _value(key, value, name)
        return cls(**values)


def parse_arm_option(text: str, base: Path) -> Arm:
    """`NAME=OPTIONS` of `--arm`: see the module's docstring."""
    name, sep, options = text.partition("=")
    if not sep or not name.strip():
        raise UserError(f"--arm {text!r}: write NAME=OPTIONS, e.g. --arm solo=single or --arm team=delegation")
    return Arm.parse(name.strip(), options, base)


def default_arms() -> tuple[Arm, ...]:
    """What an eval compares when neither the command nor the suite names arms: one agent alone,
    and the lead delegating."""
    return (Arm(name="single", mode="single"), Arm(name="delegation", mode="delegation"))


def _words(text: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    agents: list[str] = []
    for word in (w for w in re.split(r"[,\s]+", text.strip()) if w):
        key, sep, value = word.partition("=")
        if not sep:
            if key not in ("single", "delegation"):
                raise UserError(f"arm {name}: {word!r} is no option; a bare word is single or delegation")
            found["mode"] = key
        elif key == "agents":
            agents.append(value)
        else:
            found[key] = value
    if agents:
        found["agents"] = agents
    return found


def _workflow(where: object, base: Path, name: str) -> dict[str, Any]:
    if not isinstance(where, str) or not where:
        raise UserError(f"arm {name}: a workflow arm names its script: workflow=NAME|FILE")
    path = (base / where).expanduser()
    shipped = shipped_workflows()
    if path.is_file():
        script = path.read_text(encoding="utf-8")
    elif where in shipped:
        script = shipped[where].read_text(encoding="utf-8")
    else:
        raise UserError(f"arm {name}: no workflow file {where!r}; give a file or one of: {', '.join(shipped)}")
    return {"workflow": script, "workflow_name": where}


def _value(key: str, value: object, name: str) -> Any:
    try:
        if key in _INTS:
            number = int(str(value))
            if number < 1:
                raise ValueError
            return number
        if key in _FLOATS:
            real = float(str(value))
            if not real > 0:
                raise ValueError
            return real
    except ValueError:
        raise UserError(f"arm {name}: {key}={value!r} is no positive number") from None
    if key in _TEXTS:
        if not isinstance(value, str) or not value:
            raise UserError(f"arm {name}: {key} is a model string (provider:name)")
        return value
    known = ", ".join(sorted([*_INTS, *_FLOATS, *_TEXTS, "mode", "workflow", "agents"]))
    raise UserError(f"arm {name}: unknown option {key!r}; use {known}")


def arm_names(arms: Sequence[Arm]) -> list[str]:
    return [a.name for a in arms]
