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
import json
import re
from typing import Any, cast

from pydantic_core import PydanticSerializationError, to_json

__all__ = ["encodes", "plural", "safe_json", "safe_text", "unescape_bytes"]

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


_BYTE_ESCAPE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def unescape_bytes(text: str) -> str | None:
    """`text` with each `\\xNN` escape of `safe_text` (NN ≥ 80) turned back into the byte it
    stands for (as Python holds it: a lone surrogate, which `os` functions encode back to that
    byte), or None when it holds none: how a model names a file whose name it was shown escaped."""
    if "\\x" not in text:
        return None
    back = _BYTE_ESCAPE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), text)
    return back if back != text else None


def safe_json(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings, numbers) with every string made safe: `value`
    itself when nothing in it needs an escape (no copy: what almost every value costs), else a
    copy with the strings that need one escaped (dict keys too, each as `str`).

    The usual case is told by encoding `value` as JSON in pydantic-core's Rust encoder, which
    refuses a lone surrogate: a tenth of the time of walking it in Python (a subagent's events
    are checked so, five a subagent). What it refuses (a lone surrogate, or a value JSON has no
    form for) is walked."""
    try:
        to_json(value)
    except PydanticSerializationError:
        return value if _item_clean(value) else _escaped(value)
    return value


def _clean(value: object) -> bool:
    """Whether every string in `value` encodes as UTF-8 (and every dict key is a string).
    Exact type checks first: events and requests are walked so, many a run."""
    kind = type(value)
    if kind is dict:
        for key, item in cast(dict[Any, Any], value).items():
            if type(key) is not str or not _item_clean(key) or not _item_clean(item):
                return False
        return True
    if kind is list or kind is tuple:
        return all(map(_item_clean, cast(list[Any], value)))
    if isinstance(value, str | dict | list | tuple):  # a str, or a subclass: the slow way
        return _escaped(value) == value
    return True


def _item_clean(item: object) -> bool:
    kind = type(item)  # no `cast` call: this runs for every value of every event walked
    if kind is str:
        return item.isascii() or encodes(item)  # type: ignore[attr-defined]
    return kind in _SCALARS or _clean(item)


_SCALARS: frozenset[type[object]] = frozenset({int, float, bool, type(None)})


def encodes(text: str) -> bool:
    """Whether `text` can be encoded as UTF-8 (holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(str(k)): _escaped(v) for k, v in cast(dict[Any, Any], value).items()}
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in cast(list[Any], value)]
    return value


_INVISIBLE = re.compile(
    "[\u0080-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e0fff]"
)


def shown_arguments(arguments: Any) -> str:
    """A call's arguments as a person is shown them to decide on it: JSON, indented, whole, with
    each character that prints nothing or reorders the text around it (zero-width ones, the
    bidirectional overrides, tag characters, C1 controls) written as `\\uNNNN`, so nothing in them
    can hide or disguise the rest (`json` writes the C0 controls, escape included, so itself)."""
    text = json.dumps(arguments, ensure_ascii=False, indent=2)
    return _INVISIBLE.sub(lambda found: "\\u" + "\\u".join(f"{u:04x}" for u in _utf16(found.group())), text)


def _utf16(char: str) -> list[int]:
    code = ord(char)
    if code < 0x10000:
        return [code]
    code -= 0x10000
    return [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]


def plural(count: int, word: str, many: str | None = None) -> str:
    """`count` and the noun that goes with it: `1 step`, `2 steps`, `1,200 entries` (with `many`)."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"
