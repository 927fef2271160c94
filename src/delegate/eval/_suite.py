"""A suite is files: tasks, each a prompt, an optional starting workspace, and how success is judged
in code (see docs/eval.md).

Three shapes are read:

```
suite.yaml            tasks: [...] (and optionally arms: {...}, repeat: N, name: ...)
suite.jsonl           one task a line
suite/                suite.yaml (optional: arms, repeat, name, and tasks inline), and a folder
                      per task holding task.yaml and, optionally, workspace/ (its starting files)
```

A task is `id`, `prompt`, `workspace` (a folder, relative to the file that names it) or `files`
(path: text), `criteria` (every form `task` accepts, `tests_passed` included), `answer` (checks on
the final answer: `contains`, `regex`, `json_schema`, `exact`) and `args` (what a workflow arm's
script reads as `args`, beside `prompt`). Bad input is a `UserError` that names the file and what
to fix; nothing is stored for a suite that does not read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, cast

import yaml

from .._empty import empty_dict
from .._errors import ToolError, UserError
from .._record import ResultSchema
from ..subagents import parse_criteria
from ._arms import Arm

__all__ = ["AnswerChecks", "Suite", "Task", "load_suite", "shipped_suites"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TASK_KEYS = {"id", "prompt", "workspace", "files", "criteria", "answer", "args"}
_ANSWER_KEYS = {"contains", "regex", "json_schema", "exact"}


@dataclass(frozen=True, kw_only=True)
class AnswerChecks:
    """Checks on a run's final answer, each one decided in code: every `contains` text is in it,
    every `regex` matches it (`re.search`, multiline), it reads as JSON valid against `json_schema`,
    it is `exact` (both stripped)."""

    contains: tuple[str, ...] = ()
    regex: tuple[str, ...] = ()
    json_schema: Mapping[str, Any] | None = None
    exact: str | None = None

    def __bool__(self) -> bool:
        return bool(self.contains or self.regex or self.json_schema is not None or self.exact is not None)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.contains:
            found["contains"] = list(self.contains)
        if self.regex:
            found["regex"] = list(self.regex)
        if self.json_schema is not None:
            found["json_schema"] = dict(self.json_schema)
        if self.exact is not None:
            found["exact"] = self.exact
        return found

    @classmethod
    def parse(cls, value: object, where: str) -> AnswerChecks:
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise UserError(f"{where}: answer is a mapping of checks ({', '.join(sorted(_ANSWER_KEYS))})")
        given = cast("dict[str, Any]", value)
        unknown = set(given) - _ANSWER_KEYS
        if unknown:
            raise UserError(f"{where}: unknown answer check {sorted(unknown)}; use {', '.join(sorted(_ANSWER_KEYS))}")
        regex = _texts(given.get("regex"), f"{where}: answer.regex")
        for pattern in regex:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise UserError(f"{where}: answer.regex {pattern!r} is no regular expression: {exc}") from None
        schema = given.get("json_schema")
        if schema is not None:
            _check_schema(schema, where)
        exact = given.get("exact")
        if exact is not None and not isinstance(exact, str):
            raise UserError(f"{where}: answer.exact is text")
        return cls(
            contains=_texts(given.get("contains"), f"{where}: answer.contains"),
            regex=regex,
            json_schema=cast("dict[str, Any] | None", schema),
            exact=exact,
        )


@dataclass(frozen=True, kw_only=True)
class Task:
    """One task of a suite: see the module's docstring."""

    id: str
    prompt: str
    workspace: str | None = None
    """The folder whose files every attempt starts with (absolute), or None."""
    files: Mapping[str, str] = field(default_factory=empty_dict)
    criteria: tuple[str, ...] = ()
    answer: AnswerChecks = field(default_factory=AnswerChecks)
    args: Mapping[str, Any] = field(default_factory=empty_dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "prompt": self.prompt,
            "workspace": self.workspace,
            "files": dict(self.files),
            "criteria": list(self.criteria),
            "answer": self.answer.to_dict(),
            "args": dict(self.args),
        }

    @classmethod
    def parse(cls, value: object, base: Path, where: str) -> Task:
        """A task from its mapping; `base` is the folder its `workspace` is relative to."""
        if not isinstance(value, dict):
            raise UserError(f"{where}: a task is a mapping with at least id and prompt")
        given = cast("dict[str, Any]", value)
        unknown = set(given) - _TASK_KEYS
        if unknown:
            raise UserError(f"{where}: unknown task key {sorted(unknown)}; use {', '.join(sorted(_TASK_KEYS))}")
        task_id = given.get("id")
        if not isinstance(task_id, str) or not _ID.match(task_id):
            raise UserError(f"{where}: a task's id is 1-64 letters, digits, '.', '_' or '-' (got {task_id!r})")
        where = f"{where} (task {task_id})"
        prompt = given.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError(f"{where}: the prompt is missing or empty: say what the agent should do")
        try:
            criteria = tuple(parse_criteria(given.get("criteria")))
        except ToolError as exc:
            raise UserError(f"{where}: criteria: {exc}") from None
        args: object = given.get("args") or {}
        if not isinstance(args, dict):
            raise UserError(f"{where}: args is a mapping (what a workflow arm's script reads)")
        return cls(
            id=task_id,
            prompt=prompt,
            workspace=_workspace(given.get("workspace"), base, where),
            files=_files(given.get("files"), where),
            criteria=criteria,
            answer=AnswerChecks.parse(given.get("answer"), where),
            args=cast("dict[str, Any]", args),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        answer = cast("Mapping[str, Any]", data.get("answer") or {})
        return cls(
            id=str(data["id"]),
            prompt=str(data["prompt"]),
            workspace=data.get("workspace"),
            files=data.get("files") or {},
            criteria=tuple(data.get("criteria") or ()),
            answer=AnswerChecks(
                contains=tuple(answer.get("contains") or ()),
                regex=tuple(answer.get("regex") or ()),
                json_schema=answer.get("json_schema"),
                exact=answer.get("exact"),
            ),
            args=data.get("args") or {},
        )


@dataclass(frozen=True, kw_only=True)
class Suite:
    """The tasks read from a suite, with the arms and repeat count it names (if any)."""

    name: str
    source: str
    tasks: tuple[Task, ...]
    arms: tuple[Arm, ...] = ()
    repeat: int | None = None


def shipped_suites() -> dict[str, Path]:
    """The suites delegate ships, by name (`sample`: a dozen tasks over a small project)."""
    folder = Path(__file__).resolve().parent / "shipped"
    return {p.name: p for p in sorted(folder.iterdir()) if (p / "suite.yaml").is_file()}


def load_suite(path: str | Path) -> Suite:
    """Read a suite (a YAML or JSONL file, a folder, or a shipped suite's name): see the module's docstring."""
    where = Path(path).expanduser()
    if not where.exists() and str(path) in shipped_suites():
        where = shipped_suites()[str(path)]
    if where.is_dir():
        return _folder(where.resolve())
    if not where.is_file():
        names = ", ".join(shipped_suites())
        raise UserError(f"no suite at {str(path)!r}: give a suite folder, a .yaml or a .jsonl file, or one of: {names}")
    where = where.resolve()
    if where.suffix == ".jsonl":
        return _jsonl(where)
    if where.suffix in (".yaml", ".yml", ".json"):
        return _from_mapping(_read_yaml(where), where.parent, str(where), where.stem, [])
    raise UserError(f"{where}: a suite file ends in .yaml, .yml, .json or .jsonl")


def _folder(root: Path) -> Suite:
    head = root / "suite.yaml"
    top: dict[str, Any] = _read_yaml(head) if head.is_file() else {}
    found: list[Task] = []
    for folder in sorted(p for p in root.iterdir() if (p / "task.yaml").is_file()):
        value = _read_yaml(folder / "task.yaml")
        value.setdefault("id", folder.name)
        if "workspace" not in value and (folder / "workspace").is_dir():
            value["workspace"] = "workspace"
        found.append(Task.parse(value, folder, str(folder / "task.yaml")))
    return _from_mapping(top, root, str(root), root.name, found)


def _jsonl(path: Path) -> Suite:
    tasks: list[Task] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{path}:{number}: not JSON: {exc}") from None
        tasks.append(Task.parse(value, path.parent, f"{path}:{number}"))
    return _checked(Suite(name=path.stem, source=str(path), tasks=tuple(tasks)))


def _from_mapping(top: dict[str, Any], base: Path, source: str, name: str, found: list[Task]) -> Suite:
    unknown = set(top) - {"name", "tasks", "arms", "repeat"}
    if unknown:
        raise UserError(f"{source}: unknown suite key {sorted(unknown)}; use name, tasks, arms, repeat")
    listed: object = top.get("tasks") or []
    if not isinstance(listed, list):
        raise UserError(f"{source}: tasks is a list of tasks")
    tasks = [*found, *(Task.parse(t, base, f"{source}: tasks[{i}]") for i, t in enumerate(cast("list[Any]", listed)))]
    arms: object = top.get("arms") or {}
    if not isinstance(arms, dict):
        raise UserError(f"{source}: arms is a mapping of arm name to its options")
    repeat = top.get("repeat")
    if repeat is not None and (not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1):
        raise UserError(f"{source}: repeat is a whole number of at least 1")
    parsed = tuple(Arm.parse(str(k), v, base) for k, v in cast("dict[str, Any]", arms).items())
    title = top.get("name")
    return _checked(
        Suite(name=str(title) if title else name, source=source, tasks=tuple(tasks), arms=parsed, repeat=repeat)
    )


def _checked(suite: Suite) -> Suite:
    if not suite.tasks:
        raise UserError(f"{suite.source}: the suite has no tasks")
    ids = [t.id for t in suite.tasks]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise UserError(f"{suite.source}: task ids are used twice: {', '.join(twice)}")
    return suite


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not YAML: {exc}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a mapping at the top")
    return cast("dict[str, Any]", value)


def _texts(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = cast("list[object]", value) if isinstance(value, list) else [value]
    if not all(isinstance(i, str) and i for i in items):
        raise UserError(f"{where} is a text or a list of texts")
    return tuple(cast("list[str]", items))


def _check_schema(schema: object, where: str) -> None:
    if not isinstance(schema, dict):
        raise UserError(f"{where}: answer.json_schema is a JSON Schema object")
    ResultSchema(cast("dict[str, Any]", schema), f"{where}: answer.json_schema")


def _workspace(value: object, base: Path, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: workspace is a folder (relative to the suite file)")
    folder = (base / value).resolve()
    if not folder.is_dir():
        raise UserError(f"{where}: the workspace {str(folder)!r} is not a folder")
    return str(folder)


def _files(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: files is a mapping of relative path to text")
    found: dict[str, str] = {}
    for key, text in cast("dict[object, object]", value).items():
        rel = PurePosixPath(str(key))
        if rel.is_absolute() or ".." in rel.parts or not isinstance(text, str):
            raise UserError(f"{where}: files[{key!r}]: a relative path inside the workspace, mapped to text")
        found[rel.as_posix()] = text
    return found
