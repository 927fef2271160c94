"""The public surface: `delegate.__all__` is sorted, complete, and importing it is light."""

from __future__ import annotations

import subprocess
import sys

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
    modules = {"models", "subagents", "tools", "testing", "cli", "batch", "server", "skills", "mcp"}
    assert public - modules <= set(delegate.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        delegate.Nope  # noqa: B018


def test_importing_delegate_does_not_import_provider_sdks_or_the_cli() -> None:
    heavy = "('openai', 'anthropic', 'typer', 'rich', 'dbos', 'httpx2')"
    code = f"import sys, delegate; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_delegate_help_does_not_import_provider_sdks() -> None:
    code = (
        "import sys\nsys.argv=['delegate','--help']\nfrom delegate.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in ('openai', 'anthropic', 'dbos', 'sqlalchemy') if m in sys.modules))"
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
