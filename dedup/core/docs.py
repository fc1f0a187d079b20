"""The in-memory document record used by the streaming API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Doc:
    """One document: a unique id, its text and free-form metadata (kept as given)."""

    id: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)
