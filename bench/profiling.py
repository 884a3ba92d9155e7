"""Profiling the in-process gateway with pyinstrument (optional: `--profile`).

A profiled run is an extra run, never one of the measured ones. The summary
lists where the event loop's busy time goes: per function, its own (self)
time and its inclusive time, as a share of all non-idle samples (time the
loop spent waiting in `select` is idle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TOP = 25


def _identity(frame: Any) -> str:
    path = frame.file_path or ""
    for marker in ("site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = path.rsplit("/main/", 1)[-1]
    owner = f"{frame.class_name}." if getattr(frame, "class_name", None) else ""
    return f"{owner}{frame.function} ({path}:{frame.line_no})"


def _idle(frame: Any) -> bool:
    """The event loop waiting for I/O (epoll.poll, or a selector's select)."""
    path = frame.file_path or ""
    return frame.function in ("select", "poll") and ("selectors" in path or path == "<built-in>")


class Profile:
    def __init__(self, name: str, out: Path) -> None:
        self.name = name
        self.text_path = out / f"profile-{name}.txt"
        self.html_path = out / f"profile-{name}.html"
        self.session: Any = None
        self._profiler: Any = None

    def start(self) -> None:
        """Start sampling (called at the first record: startup and restore stay out)."""
        from pyinstrument import Profiler

        self._profiler = Profiler(interval=0.001, async_mode="disabled")
        self._profiler.start()

    def stop(self) -> None:
        """Stop sampling (called once the last record is committed) and write the reports."""
        profiler = self._profiler
        if profiler is None or self.session is not None:
            return
        self.session = profiler.stop()
        self.text_path.parent.mkdir(parents=True, exist_ok=True)
        self.text_path.write_text(profiler.output_text(unicode=False, color=False))
        self.html_path.write_text(profiler.output_html())

    def summary(self) -> dict[str, Any]:
        root = self.session.root_frame()
        self_time: dict[str, float] = {}
        inclusive: dict[str, float] = {}
        idle = 0.0

        def walk(frame: Any, ancestors: frozenset[str]) -> float:
            """Walk a subtree; returns the idle time inside it."""
            nonlocal idle
            if frame.is_synthetic:
                return 0.0
            ident = _identity(frame)
            if _idle(frame):
                idle += frame.time
                return float(frame.time)
            own = frame.total_self_time
            self_time[ident] = self_time.get(ident, 0.0) + own
            inner = ancestors | {ident}
            idle_inside = sum(walk(child, inner) for child in frame.children)
            if ident not in ancestors:
                inclusive[ident] = inclusive.get(ident, 0.0) + frame.time - idle_inside
            return idle_inside

        walk(root, frozenset())
        busy = max(root.time - idle, 1e-9)

        def top(table: dict[str, float]) -> list[dict[str, Any]]:
            ranked = sorted(table.items(), key=lambda kv: kv[1], reverse=True)[:TOP]
            return [
                {"function": k, "seconds": round(v, 3), "percent_of_busy": round(100 * v / busy, 1)}
                for k, v in ranked
            ]

        return {
            "tool": "pyinstrument",
            "wall_seconds": round(root.time, 3),
            "idle_seconds": round(idle, 3),
            "busy_seconds": round(busy, 3),
            "top_self": top(self_time),
            "top_inclusive": top(inclusive),
            "text": str(self.text_path),
            "html": str(self.html_path),
        }
