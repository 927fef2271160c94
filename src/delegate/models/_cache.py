"""Where delegate keeps what it can make again: the local model's weights (`models/`) and the
demo's folder (`demo/`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """`$DELEGATE_CACHE_DIR`, else `$XDG_CACHE_HOME/delegate`, else `~/.cache/delegate`."""
    root = os.environ.get("DELEGATE_CACHE_DIR")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "delegate"
