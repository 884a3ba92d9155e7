"""What the page reads: the inbox's view of open interrupts (the inbox contract).

The view (the read model, built elsewhere) satisfies this structurally; the page
imports nothing of it. Shapes are the JSON API's answers (camelCase, times as epoch
milliseconds and ISO-8601 strings); see the inbox page guide.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol


class InboxSource(Protocol):
    def interrupts(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        """The GET /interrupts answer (JSON-ready dict) for these query parameters."""

    def thread(self, agent: str, thread: str) -> dict[str, Any] | None:
        """The GET /threads/{agent}/{thread} answer; None: unknown thread."""

    def summary(self) -> dict[str, Any]:
        """The GET /interrupts/summary answer."""

    def changes(self) -> AsyncIterator[dict[str, Any]]:
        """Live changes, from now on, as Change dicts (below); ends when the view stops."""
