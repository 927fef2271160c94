"""The `delegate` command line."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run the command line. A `UserError` or `StoreError` (and bad input the OS or a decoder
    refuses) is one line on stderr and exit code 2; `--debug` or `DELEGATE_DEBUG=1` shows the
    traceback instead."""
    from .._errors import StoreError, UserError
    from .._text import safe_text
    from ._help import build

    debug = "--debug" in sys.argv[1:] or os.environ.get("DELEGATE_DEBUG") == "1"
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
    command = build()
    try:
        command(prog_name="delegate")  # also under `python -m delegate`: completion and help name `delegate`
    except (UserError, StoreError, OSError, UnicodeError, RecursionError) as exc:
        if debug:
            raise
        print(f"error: {safe_text(_message(exc))}", file=sys.stderr)  # a path's byte 0xff reads \xff
        sys.exit(2)
    finally:
        if "delegate.run._tracing" in sys.modules:  # tracing was built by this command
            from ..run import flush_traces

            flush_traces()  # spans still queued reach the collector before the process ends


def _message(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply to read: flatten it"
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"the input is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}): save it as UTF-8"
        )
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"cannot use{where}: {exc.strerror.lower()}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["main"]
