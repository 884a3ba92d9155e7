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


PREVIEW_CHARS = 80


def preview(value: object, limit: int = PREVIEW_CHARS) -> str:
    """A short, JSON-like rendering of any decoded value, for a finding's text.

    Never raises and never recurses: the value is walked with an explicit stack
    and the walk stops once `limit` characters are written, so a 1 MB string or
    an array nested 1,000 deep costs no more than a short one. Strings are quoted
    with `repr`; anything past the limit becomes `...`.
    """
    out: list[str] = []
    size = 0
    stack: list[object] = [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, _Text):
            text = str(item)
        elif isinstance(item, str):
            text = repr(item[: limit + 1])
            if len(item) > limit:
                text = text[:-1] + "..." + text[-1]
        elif isinstance(item, dict):
            parts: list[object] = [_Text("{")]
            for n, (key, member) in enumerate(item.items()):
                if n * 2 > limit:
                    parts.append(_Text(", ..."))
                    break
                parts += [_Text(", " if n else ""), key, _Text(": "), member]
            stack.extend(reversed([*parts, _Text("}")]))
            continue
        elif isinstance(item, list | tuple):
            parts = [_Text("[")]
            for n, element in enumerate(item):
                if n * 2 > limit:
                    parts.append(_Text(", ..."))
                    break
                parts += [_Text(", " if n else ""), element]
            stack.extend(reversed([*parts, _Text("]")]))
            continue
        elif item is None or isinstance(item, bool):
            text = {None: "null", True: "true", False: "false"}[item]
        elif isinstance(item, int | float):
            text = _number(item, limit)
        else:
            text = f"<{type(item).__name__}>"
        out.append(text)
        size += len(text)
    rendered = "".join(out)
    if stack or len(rendered) > limit:
        return rendered[:limit] + "..."
    return rendered


CLIP_CHARS = 300


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """Text made for a finding (a JSON Pointer into an input, a validator's message)
    cut to `limit` characters. Such text can carry a member name or tag of any length
    from the input; values themselves are rendered with `preview`."""
    return text if len(text) <= limit else text[:limit] + "..."


class _Text(str):
    """Literal text on the preview's stack, told apart from string values."""


def _number(value: int | float, limit: int) -> str:
    if isinstance(value, int) and value.bit_length() > 4 * limit:
        return f"<integer of about {int(value.bit_length() * 0.30103)} digits>"
    try:
        return str(value)
    except ValueError:  # an int beyond the interpreter's digit limit
        return "<integer>"
