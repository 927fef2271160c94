"""Text that is always valid UTF-8, whatever it came from.

Python keeps a byte that is not UTF-8 (in a file name, a command's output read with
`surrogateescape`) as a lone surrogate `\\udc80`..`\\udcff`, and a model may send a lone surrogate
too. Neither can be encoded, so neither can be stored, streamed or printed. `safe_text` replaces
each with a visible escape:

- an undecodable byte 0xNN (a surrogate `\\udcNN` with NN ≥ 80) becomes the four characters `\\xNN`;
- any other lone surrogate U+DXXX becomes the six characters `\\udxxx`.

Everything else is kept as it is.
"""

from __future__ import annotations

import codecs
from typing import Any, cast

__all__ = ["safe_json", "safe_text"]

_HANDLER = "delegate-escape"


def _escape(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out: list[str] = []
    for char in error.object[error.start : error.end]:
        code = ord(char)
        out.append(f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}")
    return "".join(out), error.end


codecs.register_error(_HANDLER, _escape)


def safe_text(text: str) -> str:
    """`text` with every character that cannot be encoded as UTF-8 replaced by an escape."""
    if text.isascii():  # a flag of the string: no scan, no copy
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", _HANDLER).decode("utf-8")
    return text


def safe_json(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string made safe: `value`
    itself when nothing in it needs an escape (the common case costs a walk, no copy), else a copy
    in which the strings that need one are escaped (dict keys too, each as `str`)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        items = cast(dict[Any, Any], value)
        for key, item in items.items():
            if not isinstance(key, str) or safe_text(key) is not key or safe_json(item) is not item:
                return {safe_text(str(k)): safe_json(v) for k, v in items.items()}
        return items
    if isinstance(value, list | tuple):
        seq = cast(list[Any], value)
        for item in seq:
            if safe_json(item) is not item:
                return [safe_json(v) for v in seq]
        return seq
    return value
