"""A finding: one reason or warning, as a plain value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason (on a rejection) or warning.

    `code` is a `Reason` or `Warn` value; `interrupt_id` is set where one
    interrupt is concerned, `path` (a JSON Pointer into the input or event)
    where a JSON location is, `rule` on protocol violations.
    """

    code: str
    detail: str
    interrupt_id: str | None = None
    path: str | None = None
    rule: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": str(self.code)}
        if self.interrupt_id is not None:
            out["interruptId"] = self.interrupt_id
        if self.path is not None:
            out["path"] = self.path
        if self.rule is not None:
            out["rule"] = str(self.rule)
        out["detail"] = self.detail
        return out


def pointer(*parts: str | int) -> str:
    """A JSON Pointer (RFC 6901) from path segments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
