"""Seconds read from an environment variable, refused with the variable's name when they are not."""

from __future__ import annotations

import math
import os


def seconds_from_environment(
    name: str,
    default: float,
    what: str,
    *,
    zero_means: str | None = None,
    environ: dict[str, str] | None = None,
) -> float:
    """``name``'s value in seconds; ``default`` when it is unset or empty.

    ``what`` says what the seconds are for (it is the error's "expected ..."); ``zero_means`` is what
    0 does where 0 is allowed (``None``: the seconds must be > 0). A value that is not a finite
    number, or out of range, raises ``ValueError`` naming the variable and the value.
    """
    environ = os.environ if environ is None else environ
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        meaning = f" ({zero_means})" if zero_means else ""
        raise ValueError(f"{name}={text!r}: expected {what}{meaning}")
    if zero_means is not None and seconds < 0:
        raise ValueError(f"{name}={text!r}: expected seconds >= 0 ({zero_means})")
    if zero_means is None and seconds <= 0:
        raise ValueError(f"{name}={text!r}: expected seconds > 0")
    return seconds
