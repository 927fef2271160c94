"""The public surface: `delegate.__all__` is sorted, complete, and importing it is light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import delegate


def test_all_is_sorted_and_names_every_public_member() -> None:
    assert delegate.__all__ == sorted(delegate.__all__, key=lambda n: (n[0].islower(), n))
    assert dir(delegate) == sorted(delegate.__all__)
    for name in delegate.__all__:
        assert getattr(delegate, name) is not None
    public = {
        name
        for name in vars(delegate)
        if not name.startswith("_") and name not in {"importlib", "TYPE_CHECKING", "Any"}
    }
    modules = {
        "agents",
        "models",
        "subagents",
        "tools",
        "testing",
        "cli",
        "batch",
        "server",
        "skills",
        "mcp",
        "loop",
        "run",
        "workspace",
        "permissions",
        "workflows",
        "engine",
        "memory",
        "eval",
    }
    assert public - modules <= set(delegate.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        delegate.Nope  # noqa: B018


def test_importing_delegate_does_not_import_provider_sdks_or_the_cli() -> None:
    heavy = "('openai', 'anthropic', 'typer', 'rich', 'dbos', 'httpx2', 'temporalio')"
    code = f"import sys, delegate; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_delegate_help_does_not_import_provider_sdks() -> None:
    code = (
        "import sys\nsys.argv=['delegate','--help']\nfrom delegate.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('openai', 'anthropic', 'dbos', 'sqlalchemy', 'temporalio')\n"
        "print('LOADED', sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "LOADED []"


def test_a_storeless_run_does_not_load_the_store() -> None:
    """The store's SQLAlchemy is about 14 MB of a process that never opens it (a storeless fan-out
    held 52 MB where it had held 37)."""
    code = (
        "import sys, tempfile\nfrom delegate import Runtime\nfrom delegate.testing import ScriptedModel, reply\n"
        "with tempfile.TemporaryDirectory() as root:\n"
        "    Runtime(model=ScriptedModel([reply('hi')]), workspace=root, store=False).run_sync('go')\n"
        "print('LOADED', sorted(m for m in ('sqlalchemy', 'delegate._store') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "LOADED []"


def test_the_store_and_its_errors_are_public_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Store` and the two errors it raises are imported from `delegate`, not from a private module:
    a write that meets another process's lock is caught as `StoreBusyError`, itself a `StoreError`."""
    import sqlite3

    import delegate._store._db
    from delegate import Store, StoreBusyError, StoreError

    monkeypatch.setattr(delegate._store._db, "SQLITE_BUSY_TIMEOUT_MS", 50)
    with Store.for_workspace(tmp_path) as store:
        holder = sqlite3.connect(tmp_path / ".delegate" / "delegate.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreBusyError, match="nothing was written") as caught:
                store.add_user("ada")
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert isinstance(caught.value, StoreError)
        assert [u.name for u in store.list_users()] == []


def test_the_error_tree_in_the_errors_docstring_draws_every_error_class_under_its_parent() -> None:
    import re

    import delegate._errors
    import delegate.batch  # its errors join the tree
    import delegate.server  # and ApiError

    drawn: dict[str, str] = {}
    parents = ["DelegateError"]
    for line in (delegate._errors.__doc__ or "").splitlines():
        branch = re.match(r"^([│ ]*)[├└]── (.+)", line)
        if branch is None:
            continue
        depth = len(branch.group(1)) // 4
        names = re.findall(r"\b[A-Z]\w+(?:Error|Cancelled|Refused)\b", branch.group(2).split("  ")[0])
        del parents[depth + 1 :]
        for name in names:
            drawn[name] = parents[depth]
        parents.append(names[-1])

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    real = {c.__name__: c.__mro__[1].__name__ for c in subclasses(delegate.DelegateError)}
    assert drawn == real


def test_a_record_type_is_imported_with_a_handful_of_modules() -> None:
    """`delegate.TaskOutput` is plain data: naming it imports the record's module and what it
    holds, not the subagent layer (66 modules, 0.57 s, when the lazy table pointed there)."""
    code = "import sys, delegate; delegate.TaskOutput; print(sum(m.startswith('delegate') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) <= 15


def test_every_type_a_user_meets_in_a_signature_is_a_top_level_name() -> None:
    for name in ("ModelProfile", "MCPServerConfig", "CommandLimits", "Status", "StopReason", "Artifact", "Skipped"):
        assert name in delegate.__all__


def test_reading_stored_runs_loads_no_runtime(tmp_path: Path) -> None:
    """`delegate runs list` and `runs show` only read the store: they load no loop, tools,
    subagents, workflow host or provider SDK (`runs show` imported 691 modules where it now
    imports 512; the suite starts such commands by the hundred)."""
    from delegate import Runtime
    from delegate.testing import ScriptedModel, reply

    run_id = Runtime(model=ScriptedModel([reply("hi")]), workspace=tmp_path).run_sync("go").run_id
    heavy = (
        "openai",
        "anthropic",
        "delegate.loop",
        "delegate.tools",
        "delegate.subagents",
        "delegate.agents",
        "delegate.workflows._host",
    )
    code = (
        "import sys\nfrom delegate.cli import main\n"
        f"for argv in (['runs', 'list'], ['runs', 'show', {run_id!r}]):\n"
        "    sys.argv = ['delegate', *argv]\n"
        "    try:\n        main()\n    except SystemExit:\n        pass\n"
        f"print('LOADED', sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert out.count(run_id) >= 2  # listed, then shown
    assert out.strip().splitlines()[-1] == "LOADED []"
