"""Labels made safe for file names and LaTeX labels, shared by the report's figures and tables."""

from __future__ import annotations

import re


def slug(text: str) -> str:
    """A file-name-safe version of a label."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower() or "unnamed"
