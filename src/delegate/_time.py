"""Moments as delegate keeps them: timezone-aware datetimes, written as ISO 8601 text in UTC.

One codec for the store, batches and every JSON face (`delegate run --json`, `GET /runs/{id}`,
batch export). A naive datetime (one without a timezone) is refused both ways, never guessed:
`iso` will not write one (whose clock's local time would it be? a bug to fix where it was made),
and `parse_iso` will not read one back (text without an offset was not written by delegate).
Fields read back through pydantic are `AwareDatetime`, which refuses them the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

__all__ = ["iso", "parse_iso", "utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)


@overload
def iso(moment: datetime) -> str: ...
@overload
def iso(moment: None) -> None: ...
def iso(moment: datetime | None) -> str | None:
    """`moment` as ISO 8601 text in UTC, to the microsecond (so texts sort as times); None stays
    None. Raises `ValueError` for a naive datetime."""
    if moment is None:
        return None
    if moment.tzinfo is not UTC:
        if moment.tzinfo is None:
            raise ValueError(f"timestamps must be timezone-aware, got {moment!r}: use datetime.now(UTC)")
        moment = moment.astimezone(UTC)
    # `isoformat(timespec="microseconds")` spelled out, with `%` (a format string or an f-string
    # took as long as `isoformat`, which asks the timezone for its offset): 1.1 µs -> 0.7, and a
    # subagent's stored record has two times
    m = moment
    fields = (m.year, m.month, m.day, m.hour, m.minute, m.second, m.microsecond)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06d+00:00" % fields  # noqa: UP031


def parse_iso(text: str | None) -> datetime | None:
    """The moment ISO 8601 `text` names (None stays None). Raises `ValueError` for text that is
    not a time, or names one without a timezone."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no timezone; delegate writes every time with one")
    return moment
