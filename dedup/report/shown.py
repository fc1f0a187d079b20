"""How a value of the user's data (an id, a record key, an n-gram) is shown in a message or on the
report page: whole when short, else its start and its length, so that one 10 KB id cannot make a
92 KB error line or stretch the page."""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 80
"""Characters of a value shown before it is cut."""


def shorten(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`str(value)`, or its first `limit` characters, an ellipsis and its length when longer."""
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def shown_repr(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` for a message, shortened as `shorten` does."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(str(value)):,} characters)"
