"""Keeping repeated identical warnings from flooding `agui.warnings`.

Per (agent, thread, code, rule) at most `burst` warnings pass in a window;
the rest are counted as suppressed and the count rides on the next warning
of that key that passes (`suppressed` in the record).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

MAX_KEYS = 100_000


@dataclass(slots=True)
class _Window:
    start_ms: int
    passed: int = 0
    suppressed: int = 0


class WarningLimiter:
    def __init__(self, burst: int, window_ms: int) -> None:
        self._burst = burst
        self._window_ms = window_ms
        self._windows: dict[tuple[str, ...], _Window] = {}

    def admit(
        self, key: tuple[str, ...], now_ms: int, journal: list[Any] | None = None
    ) -> tuple[bool, int]:
        """(publish?, warnings suppressed on this key since the last published one).

        With `journal`, what this call changes is noted there so `undo` can take it
        back (a warning of a round that aborts must not count against the burst).
        """
        window = self._windows.get(key)
        if journal is not None:
            journal.append((key, None if window is None else replace(window)))
        if window is None or now_ms - window.start_ms >= self._window_ms:
            carried = window.suppressed if window is not None else 0
            if len(self._windows) >= MAX_KEYS:
                self._forget(now_ms)
            self._windows[key] = _Window(now_ms, passed=1)
            return True, carried
        if window.passed < self._burst:
            window.passed += 1
            carried, window.suppressed = window.suppressed, 0
            return True, carried
        window.suppressed += 1
        return False, 0

    def undo(self, journal: list[Any]) -> None:
        """Restore the windows `admit` changed, latest first."""
        for key, window in reversed(journal):
            if window is None:
                self._windows.pop(key, None)
            else:
                self._windows[key] = window
        journal.clear()

    def _forget(self, now_ms: int) -> None:
        stale = [k for k, w in self._windows.items() if now_ms - w.start_ms >= self._window_ms]
        for key in stale:
            del self._windows[key]
        if len(self._windows) >= MAX_KEYS:
            self._windows.clear()
