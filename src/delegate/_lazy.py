"""Names a package imports on first use (PEP 562), so importing it costs almost nothing until
something is used: `import delegate` (and so `delegate --help`) loads no runtime, SDK or store."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each name of `where` from the module
    it maps to (relative to `package`) when first asked for, and keeps it in the package."""
    import sys

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
