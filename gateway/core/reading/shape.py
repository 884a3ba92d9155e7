"""The shape of an incoming RunAgentInput, read by the processing model.

Unrecognised material (unknown members, unrecognised union members) is
located so it can be stripped with a warning; a known field carrying a value
the schema rejects is malformed, never coerced or repaired. What is left once
stripped must be an input the strict validator reads (`conforms`): stripping
never removes a required member (an image part's `source` of a type the protocol
does not define makes the input malformed, not a part without its source).
Malformed locations are listed up to MAX_MALFORMED, the errors past them
counted. Objects the schema leaves open (`state`, `forwardedProps`, `payload`,
`metadata`, ...) are typed `Any`/dict by the protocol's models and so are never
walked into.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import islice
from operator import itemgetter
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from gateway.core.reading.error_count import Unsure, counter
from gateway.core.reading.input_schema import (
    ALTERNATIVE,
    ANY,
    REQUIRED,
    RULED_OUT,
    Path,
    inner,
    lenient,
    lenient_count,
    lenient_schema,
    quick,
    validator,
    walker,
)
from gateway.core.reading.input_schema import schema as typed_schema
from gateway.core.reading.strip import error_pointer, remove_paths, unknown_members
from gateway.core.values.findings import pointer, preview

__all__ = [
    "Entry",
    "Path",
    "Request",
    "Shape",
    "error_pointer",
    "read_input",
    "remove_paths",
    "unknown_members",
]


class Entry(NamedTuple):
    """One resume entry of a valid input."""

    interrupt_id: str
    status: str  # resolved | cancelled
    payload: Any = None


_ids = itemgetter("interruptId")


@dataclass(frozen=True, slots=True)
class Request:
    """What the judge reads of a valid input (every other field is passed through)."""

    run_id: str
    # the resume entries as received (valid): each read when it is needed (`entry`), so
    # that 25,000 of them, most naming no open interrupt, cost one pass for their ids
    resume: list[dict[str, Any]] | None

    def ids(self) -> list[str]:
        """Each resume entry's interrupt id, in order."""
        return list(map(_ids, self.resume or ()))

    def entry(self, index: int) -> Entry:
        """The resume entry at `index`."""
        assert self.resume is not None
        found = self.resume[index]
        return Entry(found["interruptId"], found["status"], found.get("payload"))


@dataclass(slots=True)
class Shape:
    """What reading an input found. Every path points into the input as received."""

    model: Request | None = None  # set when the input is valid (after stripping)
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (pointer, message)
    unknown: list[Path] = field(default_factory=list)  # unknown members
    stripped_unions: list[tuple[Path, str]] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)  # the union members removed
    raw: Any = None  # the input as received
    # the valid input less `unknown` and `removed` (the input itself when it has none)
    stripped: Any = None
    # errors of the validator past the MAX_MALFORMED locations `malformed` lists: counted,
    # neither located nor built into findings (a flood of them costs what 50 cost)
    unlisted: int = 0

    @property
    def doc(self) -> dict[str, Any] | None:
        """The valid input with its unrecognised union members removed (None: not valid)."""
        if self.model is None:
            return None
        return remove_paths(self.raw, self.removed)


def read_input(raw: dict[str, Any]) -> Shape:
    """Validate `raw` against the protocol's RunAgentInput, strictly, by wire names.

    The protocol's own schema is read as plain typed dicts (no model object is
    built). An extra member is unknown (stripped), an element whose union tag is a
    string the protocol does not define is unrecognised (stripped), any other error
    is malformed. One validation ignoring extra members (`input_schema.lenient`)
    comes first: when its result equals the input there is none, and a valid input
    costs nothing more; else one walk along the schema (`input_schema.walker`) lists
    the extra members and the unrecognised elements when they are all there is, and
    builds the input without them. Anything else is read error by error from the
    validator that forbids extra members (`read_by_errors`), as a property test holds
    every reading to.
    """
    shape = Shape(raw=raw)
    if _tags_malformed(shape, raw):
        return shape
    try:
        checked = quick().validate_python(raw, strict=True)
    except ValidationError:
        errors = _lenient_errors(raw)
        surely = _surely_malformed(errors)
        if surely and isinstance(errors, _Counted):
            errors.load()  # they are read: counted by the validator that builds them
        count = errors.count
        # a flood: all unrecognised tags? One pass says, unless its first errors show a
        # malformed value (then the pass is not made)
        if count > MANY_ERRORS and not surely:
            flood = _flood(shape, raw, count)
            if flood is not None:
                return flood
        # a malformed input is read from these errors (the strict validator's, less the
        # extra members): it is not validated again; past MAX_MALFORMED locations they
        # are counted, not read
        text_tags = count > MANY_ERRORS and _text_tags_only(raw)
        if _malformed_by(shape, raw, errors, text_tags=text_tags):
            return shape
        return _by_errors(shape, raw)
    if checked == raw:  # no typed dict of the input holds an extra member
        shape.stripped = raw
        return _valid(shape, raw, [])
    # valid but for extra members: one pass lists them (and `checked` is what `lenient`
    # returns for the input less them)
    flood = _flood(shape, raw, 0, checked)
    return flood if flood is not None else _by_errors(shape, raw)


def read_by_errors(raw: dict[str, Any]) -> Shape:
    """`read_input` by the strict validator's errors alone, each read in turn: what
    `read_input` falls back to, and the reading its faster paths must equal."""
    shape = Shape(raw=raw)
    if _tags_malformed(shape, raw):
        return shape
    return _by_errors(shape, raw)


def _tags_malformed(shape: Shape, raw: dict[str, Any]) -> bool:
    """A deep input whose union tags are not all text is malformed before any validator
    meets it (recorded in `shape.malformed`)."""
    messages = raw.get("messages")
    if not isinstance(messages, list) or not messages or _shallow(raw):
        return False  # (no message holds a tag: nothing to find, however deep the input)
    if not _container_tags_possible(messages):
        return False  # (an input holding an integer beyond 64 bits, most often)
    shape.malformed = _non_text_tags(raw)
    return bool(shape.malformed)


def _errors(exc: ValidationError) -> list[Any]:
    return exc.errors(include_url=False, include_input=False, include_context=False)


_NEXT_ERROR = '},{"type":"'  # between two errors of the validator's JSON, and nowhere else
_EXTRA = '{"type":"extra_forbidden"'


class _Errors:
    """A ValidationError's errors in order, each built only when it is read.

    Up to ERRORS_AT_ONCE they are built at once. A flood of them is written as JSON
    by the validator (no Python object per error: a quarter of the cost of building
    them) and read ERRORS_AT_ONCE at a time: in that text an error's members are its
    type, its location and its message, and any quote inside a string is escaped,
    so `},{"type":"` is found only between two errors."""

    def __init__(self, exc: ValidationError | None) -> None:
        self.count = 0 if exc is None else exc.error_count()
        self._built: list[Any] | None = None
        self._text = ""
        if exc is None:
            self._built = []
        elif self.count <= ERRORS_AT_ONCE:
            self._built = _errors(exc)
        else:
            self._text = exc.json(include_url=False, include_input=False, include_context=False)
        self._slice: list[Any] = []  # the slice read last, its first error's index
        self._first = 0
        self._after = 0  # where the text after it starts

    def read(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[int, Any]]:
        """(index, error) of each error in order, but for a slice of the flood's text
        whose errors are all of the kinds in `skip`: it is not parsed at all."""
        if self._built is not None:
            self._slice, self._first, self._after = self._built, 0, 0
            yield from enumerate(self._built)
            return
        text = self._text
        start, first = 1, 0  # past the opening `[`
        marks = [f'{{"type":"{kind}"' for kind in skip]
        while start < len(text) - 1:
            stop, size = start, 0
            while size < ERRORS_AT_ONCE:
                size += 1
                stop = text.find(_NEXT_ERROR, stop + 1)
                if stop < 0:
                    stop = len(text) - 2  # the closing `}` of the last error
                    break
            if not marks or sum(text.count(m, start, stop) for m in marks) != size:
                self._slice = orjson.loads("[" + text[start : stop + 1] + "]")
                self._first, self._after = first, stop + 2
                yield from enumerate(self._slice, first)
            start, first = stop + 2, first + size

    def rest(self, at: int) -> int:
        """How many errors from the `at`-th on (one of the slice read last) are not
        extra members."""
        within = self._slice[at - self._first :]
        extras = sum(error["type"] == "extra_forbidden" for error in within)
        extras += self._text.count(_EXTRA, self._after) if self._text else 0
        return self.count - at - extras


# Errors built at once, or read from the validator's JSON at a time.
ERRORS_AT_ONCE = 256


def _lenient_errors(raw: dict[str, Any]) -> Errors:
    """The errors `lenient` reports for the invalid input `raw`, in its order: counted
    and read window by window of its messages (`_Windows`) where they can be counted
    without the validator, else from one validation of it all."""
    count = lenient_count()
    if count is None:
        return _errors_of(raw)
    messages = raw.get("messages")
    if type(messages) is list and len(messages) > WINDOW and _windowed():
        try:
            return _Windows(raw, count(raw))
        except Unsure:
            return _errors_of(raw)
    return _Counted(raw, count)


# Messages validated at a time when a flood's errors are read window by window.
WINDOW = 256
# A window of messages (past the first) is validated as an input with these members
# (its other required ones, valid) and no other: its errors are its messages' alone.
_FILLED = {"threadId": "", "runId": ""}
_ROLE = "role"


class _Windows:
    """`lenient`'s errors on an input, counted without the validator (`count`), and read
    in order window by window of WINDOW messages, each window validated only when
    reached: the first 50 locations of 77,000 errors cost the validation of 256
    messages. A window whose messages each have no error or only an unrecognised `role`
    is not validated when those errors are skipped (`read(skip)`): its errors are counted.

    The input's errors, in the validator's order, are those of the members before
    `messages` (in the schema's order), then each message's, then those of the members
    after it: the first window is validated with every other member, the next ones
    alone, their locations shifted to where they are in the input."""

    def __init__(self, raw: dict[str, Any], count: int) -> None:
        self.count = count
        self._raw = raw
        self._messages: list[Any] = raw["messages"]
        union = inner(inner(typed_schema()["fields"]["messages"]["schema"])["items_schema"])
        self._roles = frozenset(union["choices"]) if union.get("type") == "tagged-union" else None

    def read(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[int, Any]]:
        """(index, error) of each error in order; in a window whose errors are all
        unrecognised roles (when `skip` holds `union_tag_invalid`) or that has none,
        they are counted, not read."""
        messages = self._messages
        fields = list(typed_schema()["fields"])
        after = frozenset(fields[fields.index("messages") + 1 :])
        head = _errors_of({**self._raw, "messages": messages[:WINDOW]})
        first = head.read(skip)
        later: tuple[int, Any] | None = None
        for at, error in first:
            if error["loc"] and error["loc"][0] in after:
                later = at, error
                break
            yield at, error
        # the errors before `messages` and of its first window: all of them but `head`'s
        # past that window, which are the input's last
        base = head.count if later is None else later[0]
        for start in range(WINDOW, len(messages), WINDOW):
            window = messages[start : start + WINDOW]
            quiet = self._quiet(window, skip)
            if quiet is not None:
                base += quiet
                continue
            errors = _errors_of({**_FILLED, "messages": window})
            for at, error in errors.read(skip):
                loc = error["loc"]
                yield base + at, {**error, "loc": ("messages", loc[1] + start, *loc[2:])}
            base += errors.count
        if later is not None:
            shift = base - later[0]
            yield base, later[1]
            for at, error in first:
                yield shift + at, error

    def _quiet(self, window: list[Any], skip: frozenset[str]) -> int | None:
        """How many errors `window` has when none of them need be read (none, or only
        unrecognised roles skipped), else None."""
        count = _item_count()
        roles = self._roles if "union_tag_invalid" in skip else None
        errors = 0
        for message in window:
            if roles is not None and type(message) is dict:
                role = message.get(_ROLE)
                if type(role) is str and role not in roles:
                    errors += 1  # that one error, its tag's (a string: skipped)
                    continue
            try:
                if count(message):
                    return None
            except Unsure:
                return None
        return errors

    def rest(self, at: int) -> int:
        """How many errors from the `at`-th on are not extra members (`lenient`
        reports none)."""
        return self.count - at


class _Counted:
    """`lenient`'s errors on an input, read from one validation of it all, made when they
    are first read (`load`); until then counted without the validator (`count`), and a
    sample of them (`sample`) read from the input with every list cut to WINDOW elements
    (the sample is all of them when no list was cut)."""

    def __init__(self, raw: dict[str, Any], count: Callable[[Any], int]) -> None:
        self._raw = raw
        self._count = count
        self._counted: int | None = None
        self._errors: _Errors | None = None
        self._sample: _Errors | None = None

    @property
    def count(self) -> int:
        """How many errors there are: the validator's count once validated, else the
        counter's (the validator's when it is unsure)."""
        if self._errors is not None:
            return self._errors.count
        if self._counted is None:
            try:
                self._counted = self._count(self._raw)
            except Unsure:
                return self.load().count
        return self._counted

    def load(self) -> _Errors:
        """The errors of one validation of the whole input."""
        if self._errors is None:
            self._errors = _errors_of(self._raw)
        return self._errors

    def sample(self) -> Iterator[tuple[int, Any]]:
        """Errors of the input's, not all of them nor in order (each is one of the
        input's: an element's errors do not depend on the other elements)."""
        if self._errors is not None:
            return self._errors.read()
        if self._sample is None:
            lost: list[bool] = []
            self._sample = _errors_of(_cut(self._raw, _CUT_DEPTH, lost))
            if not lost:
                self._errors = self._sample  # (no list was cut: it is every error)
        return self._sample.read()

    def read(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[int, Any]]:
        """(index, error) of each error in order (`_Errors.read`)."""
        return self.load().read(skip)

    def rest(self, at: int) -> int:
        """`_Errors.rest` of the errors read."""
        return self.load().rest(at)


# A validator's errors, read in order: all of them built or written, or counted and read
# window by window, or counted and read when first needed
Errors = _Errors | _Windows | _Counted

# Lists are cut for a sample of errors down to this depth (deeper values are kept whole).
_CUT_DEPTH = 8


def _cut(node: Any, depth: int, lost: list[bool]) -> Any:
    """`node` with each list in it (down to `depth`) cut to WINDOW elements; `lost`
    gets an entry for each list cut."""
    if depth == 0:
        return node
    if type(node) is dict:
        return {key: _cut(value, depth - 1, lost) for key, value in node.items()}
    if type(node) is list:
        if len(node) > WINDOW:
            lost.append(True)
        return [_cut(item, depth - 1, lost) for item in node[:WINDOW]]
    return node


def _errors_of(doc: dict[str, Any]) -> _Errors:
    try:
        lenient().validate_python(doc, strict=True)
    except ValidationError as exc:
        return _Errors(exc)
    return _Errors(None)


@cache  # no arguments: one value
def _windowed() -> bool:
    """Whether a window of messages can be validated alone: `_FILLED` is every other
    required member, valid, and the messages are a list of a tagged union the counter
    counts."""
    fields = lenient_schema()["fields"]
    required = {name for name, spec in fields.items() if spec["required"]} - {"messages"}
    if required != set(_FILLED) or any(
        inner(fields[name]["schema"]) != {"type": "str"} for name in _FILLED
    ):
        return False
    # the errors of members after `messages` are never skipped unread (no union tag
    # there, and `lenient` reports no extra member): where the first window's reading
    # meets them is where the messages' errors end
    names = list(fields)
    if any(_holds_tags(fields[name]) for name in names[names.index("messages") + 1 :]):
        return False
    try:
        _item_count()
    except (Unsure, KeyError):
        return False
    return True


def _holds_tags(node: Any) -> bool:
    if isinstance(node, list | tuple):
        return any(_holds_tags(item) for item in node)
    if not isinstance(node, dict):
        return False
    return node.get("type") == "tagged-union" or any(map(_holds_tags, node.values()))


@cache  # no arguments: one value
def _item_count() -> Callable[[Any], int]:
    """The count of `lenient`'s errors on one message."""
    messages = inner(lenient_schema()["fields"]["messages"]["schema"])
    return counter(messages["items_schema"])


def _by_errors(shape: Shape, raw: dict[str, Any]) -> Shape:
    try:
        validator().validate_python(raw, strict=True)
    except ValidationError as exc:
        if _malformed_by(shape, raw, _Errors(exc)):
            return shape
        errors = _errors(exc)
    else:
        errors = []
    said: dict[tuple[str, int], str] = {}  # one message per tag and union: tags repeat
    routes: dict[tuple[Any, ...], tuple[int, ...]] = {}
    for error in errors:
        kind = error["type"]
        if kind == "extra_forbidden":
            shape.unknown.append(_member_path(error["loc"], routes))
            continue
        path, node, relevant = _locate(raw, error["loc"])
        if not relevant:
            continue  # an alternative of a union that the value's own type rules out
        tag = _text_tag(raw, path, node) if kind == "union_tag_invalid" else None
        assert tag is not None  # (else `_malformed_by` found the input malformed)
        message = said.get((tag, id(node)))
        if message is None:
            message = said[tag, id(node)] = _tag_message(
                tag, node["discriminator"], tuple(node["choices"])
            )
        shape.stripped_unions.append((path, message))
    shape.removed = [path for path, _ in shape.stripped_unions]
    removed = set(shape.removed)
    if removed:  # members of a removed element go with it
        shape.unknown = [
            p for p in shape.unknown if not any(p[:n] in removed for n in range(len(p)))
        ]
    return _valid(shape, raw, shape.unknown)


# Malformed locations listed one by one, at most; the validator's errors past them are
# counted (`Shape.unlisted`), not located: 18,000 of them cost what 50 cost.
MAX_MALFORMED = 50


def _malformed_by(
    shape: Shape,
    doc: Any,
    errors: Errors,
    located: Callable[[Path], Path] | None = None,
    note: Callable[[Path], str | None] | None = None,
    text_tags: bool = False,
) -> bool:
    """Whether the validator's `errors` on `doc` make it malformed: any error other than
    an extra member, an alternative the value's type rules out or a union tag that is a
    string. If so, `shape` is made malformed: its first MAX_MALFORMED locations listed
    (each with every message found there), the errors past them counted, not read.
    `text_tags`: every union tag of `doc` is a string (`_text_tags_only`), so that no
    unrecognised tag needs to be located to be told from a malformed one.

    `located` maps a path in `doc` to the input as received (`doc` is then the input
    less what was stripped), and `note` says why a member is missing from `doc` (None:
    not stripped)."""
    malformed: list[tuple[str, str]] = []
    wheres: set[str] = set()
    skip = frozenset({"extra_forbidden", *(["union_tag_invalid"] if text_tags else [])})
    for at, error in errors.read(skip):
        kind = error["type"]
        if kind in skip:
            continue
        path, node, relevant = _locate(doc, error["loc"])
        if not relevant:
            continue  # an alternative of a union that the value's own type rules out
        if kind == "union_tag_invalid" and _text_tag(doc, path, node) is not None:
            continue  # unrecognised, not malformed
        message = error["msg"]
        if kind == "missing" and error["loc"]:
            path = (*path, error["loc"][-1])
        if located is not None:
            path = located(path)
            why = note(path) if note is not None and kind == "missing" else None
            message = (
                f"{message} (in the input less what the gateway strips)"
                if why is None
                else f"{why}; {_REQUIRED_NOTE}"
            )
        where = pointer(*path)
        if where not in wheres:
            if len(wheres) == MAX_MALFORMED:  # the rest are counted, not read
                shape.unlisted = errors.rest(at)
                break
            wheres.add(where)
        malformed.append((where, message))
    if not malformed:
        return False
    shape.malformed = _merged(malformed)
    shape.unknown = []
    shape.stripped_unions = []
    shape.removed = []
    shape.stripped = None
    return True


def _valid(shape: Shape, raw: dict[str, Any], unknown: list[Path]) -> Shape:
    """`shape` of a valid input: what it strips is taken out (`stripped`), and what is
    left must be what the strict validator reads. Stripping never removes a required
    member: where it would, the input is malformed (`conforms`)."""
    shape.unknown = unknown
    if shape.removed or unknown:
        if shape.stripped is None:
            shape.stripped = remove_paths(raw, [*shape.removed, *unknown])
        notes = dict(shape.stripped_unions)
        if not conforms(shape, raw, shape.stripped, shape.removed, notes.__getitem__):
            return shape
    else:
        shape.stripped = raw
    shape.model = Request(run_id=raw["runId"], resume=raw.get("resume"))
    return shape


_UNREAD: Any = object()  # (`conforms`: what `lenient` returns for the copy, not known)


def conforms(
    shape: Shape,
    raw: dict[str, Any],
    doc: dict[str, Any],
    removed: Sequence[Path],
    notes: Callable[[Path], str] | None = None,
    read: Any = _UNREAD,
) -> bool:
    """Whether `doc`, the input `raw` less the elements and members at `removed` (their
    order free), is an input the strict validator reads: nothing is forwarded that the
    protocol's models would not read. If it is not, `shape` is made malformed, each
    problem pointed at in `raw` (`notes`: why an unrecognised union member at one of
    `removed` was removed). `read`, when given, is what `lenient` returns for `doc`,
    known without validating it again (`_flood`).

    The validator that ignores extra members returns `doc` itself exactly when `doc` is
    valid and holds no extra member (half the strict validator's cost on a valid input);
    its errors are the strict validator's less extra members (and when it finds none, the
    strict validator's errors are read)."""
    try:
        if (lenient().validate_python(doc, strict=True) if read is _UNREAD else read) == doc:
            return True
    except ValidationError as exc:
        errors = _Errors(exc)  # the strict validator's errors less extra members
    else:
        try:  # valid, but for what the gateway strips
            validator().validate_python(doc, strict=True)
        except ValidationError as exc:
            errors = _Errors(exc)
        else:
            return True
    gone: dict[Path, list[int]] = {}  # list elements removed, by the list's path in `raw`
    for path in removed:
        if path and type(path[-1]) is int:
            gone.setdefault(path[:-1], []).append(path[-1])
    for indexes in gone.values():
        indexes.sort()

    def located(path: Path) -> Path:
        out: list[str | int] = []
        for part in path:
            if type(part) is int:
                for index in gone.get(tuple(out), ()):
                    if index > part:
                        break
                    part += 1  # an element before it was removed
            out.append(part)
        return tuple(out)

    removed_at = set(removed) if notes is not None else set()

    def note(path: Path) -> str | None:
        return notes(path) if notes is not None and path in removed_at else None

    if not _malformed_by(shape, doc, errors, located, note):
        # errors only of kinds that strip (an extra member, an unrecognised tag) left in
        # what was stripped: still not what the validator reads
        listed = [error for _, error in islice(errors.read(), MAX_MALFORMED)]
        shape.malformed = _merged(
            (pointer(*located(_locate(doc, e["loc"])[0])), f"{e['msg']} (once stripped)")
            for e in listed
        )
        shape.unlisted = errors.count - len(listed)
        shape.unknown, shape.stripped_unions, shape.removed, shape.stripped = [], [], [], None
    shape.model = None
    return False


# Over this many validation errors, one schema-guided pass looks for extra members and
# unrecognised union tags first: building each error costs more than finding each.
MANY_ERRORS = 256


def _flood(shape: Shape, raw: dict[str, Any], count: int, checked: Any = _UNREAD) -> Shape | None:
    """The shape of an input whose `count` errors (extra members ignored) are all
    unrecognised union elements, found with its extra members by one walk
    (`input_schema.walker`), in the order the strict validator reports them; None when
    the walk does not account for every error (then each error is read).

    `checked`: what `lenient` returned for `raw` (valid to it, `count` 0). The walk
    takes out no element then, only members `lenient` ignores, along the variants the
    validator reads (a tagged union's by its tag, a plain union's alternative by the
    value's type, as `input_schema` holds them), and what `lenient` returns does not
    depend on the members it ignores: for the input less them it returns `checked`
    again, so `conforms` compares that, without validating the copy once more."""
    extras: list[Path] = []
    tags: list[tuple[Path, dict[str, Any]]] = []
    stripped = walker()(raw, (), extras, tags)
    required = [path for path, union in tags if union is REQUIRED]
    if len(tags) - len(required) != count:
        return None
    shape.stripped = stripped
    said: dict[tuple[str, int], str] = {}

    def message(path: Path, union: dict[str, Any]) -> str:
        tag = _at(raw, path)[union["discriminator"]]
        found = said.get((tag, id(union)))
        if found is None:
            found = said[tag, id(union)] = _tag_message(
                tag, union["discriminator"], tuple(union["choices"])
            )
        return found

    if required:  # a required member stripped: malformed, as `conforms` finds it, unchecked
        listed = set(required[:MAX_MALFORMED])  # a message is written for these alone
        unions: dict[Path, dict[str, Any]] = {}
        # a member's entries all come before its REQUIRED one (the pass lists that once
        # it has walked the member): the tags are read up to the last listed member's
        left = len(listed)
        for path, union in tags:
            if union is REQUIRED:
                left -= path in listed
                if not left:
                    break
            elif path in listed:
                unions[path] = union
        _required_stripped(shape, required, lambda path: message(path, unions[path]))
        return shape
    tags = [(path, union) for path, union in tags if union is not RULED_OUT]
    unions = dict(tags)
    shape.removed = [path for path, _ in tags]
    # checked before a message is written for each (a flood of them is common)
    if (shape.removed or extras) and not conforms(
        shape,
        raw,
        stripped,
        shape.removed,
        lambda path: message(path, unions[path]),
        checked if not shape.removed else _UNREAD,
    ):
        return shape
    shape.stripped_unions = [(path, message(path, union)) for path, union in tags]
    shape.unknown = extras
    shape.model = Request(run_id=raw["runId"], resume=raw.get("resume"))
    return shape


def _surely_malformed(errors: Errors) -> bool:
    """Whether one of the first ERRORS_AT_ONCE errors (or of a sample of them) is surely
    of a malformed value: neither an extra member nor a union tag, and under no
    alternative of a plain union (where the value's type may rule the error out). Only
    which way is tried first depends on it, not what is found."""
    read = errors.sample() if isinstance(errors, _Counted) else errors.read()
    for _, error in islice(read, ERRORS_AT_ONCE):
        if error["type"] not in ("union_tag_invalid", "extra_forbidden") and not any(
            type(part) is str and part.startswith(ALTERNATIVE) for part in error["loc"]
        ):
            return True
    return False


# A member `role` or `type` whose value is no string, as orjson writes it (compact; a quote
# inside a string is escaped, so `"role":` is found only where a member is named)
_NON_TEXT_TAG = re.compile(rb'"(?:role|type)":[^"]')


def _text_tags_only(raw: dict[str, Any]) -> bool:
    """Whether no object in `raw` has a `role` or `type` member that is not a string, so
    that every union tag in it is a string (read from its text, without a walk)."""
    try:
        text = orjson.dumps(raw)
    except orjson.JSONEncodeError:
        return False
    return _NON_TEXT_TAG.search(text) is None


def _required_stripped(shape: Shape, paths: list[Path], note: Callable[[Path], str]) -> None:
    """`shape` made malformed by the required members at `paths` (unrecognised union
    elements, in the validator's order): the first MAX_MALFORMED listed, the rest counted."""
    shape.malformed = _merged(
        (pointer(*path), f"{note(path)}; {_REQUIRED_NOTE}") for path in paths[:MAX_MALFORMED]
    )
    shape.unlisted = max(0, len(paths) - MAX_MALFORMED)
    shape.unknown, shape.stripped_unions, shape.removed, shape.stripped = [], [], [], None


_REQUIRED_NOTE = "the member is required, so it is not stripped: the input is malformed"


def _shallow(raw: object) -> bool:
    """Whether `raw` nests at most 254 levels (and holds no integer beyond 64 bits):
    then no union tag in it is too deep for the validator to render in a message."""
    try:
        orjson.dumps(raw)
    except orjson.JSONEncodeError:
        return False
    return True


_TAG_OF_PART = "type"
# A member `role` or `type` whose value is an array or an object, as orjson writes it: in
# its compact text no string holds these bytes (a quote in a string is escaped)
_CONTAINER_TAGS = (b'"role":[', b'"role":{', b'"type":[', b'"type":{')


def _container_tags_possible(messages: list[Any]) -> bool:
    """False when no object in `messages` has a `role` or `type` that is an array or an
    object, so that `_non_text_tags` finds nothing: their text, when orjson writes it (at
    most 254 levels, no integer beyond 64 bits), holds no such member."""
    try:
        text = orjson.dumps(messages)
    except orjson.JSONEncodeError:
        return True
    return any(tag in text for tag in _CONTAINER_TAGS)


def _non_text_tags(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Union tags (a message `role`, a content part's or its source's `type`) that are
    arrays or objects: malformed, found before validation.

    The validator would print such a tag into its error message, and a tag nested
    a thousand levels deep cannot be printed (its failure reaches stderr).
    """
    found: list[tuple[str, str]] = []
    messages = raw.get("messages")
    if not isinstance(messages, list):
        return found
    for m, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if isinstance(message.get("role"), list | dict):
            found.append(_not_text(("messages", m), "role"))
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for c, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            if isinstance(part.get(_TAG_OF_PART), list | dict):
                found.append(_not_text(("messages", m, "content", c), _TAG_OF_PART))
            source = part.get("source")
            if isinstance(source, dict) and isinstance(source.get(_TAG_OF_PART), list | dict):
                found.append(_not_text(("messages", m, "content", c, "source"), _TAG_OF_PART))
    return found


def _locate(raw: Any, loc: tuple[Any, ...]) -> tuple[Path, Any, bool]:
    """Where a validation error's location points in `raw`, read along the schema.

    Returns the path, the schema node there (a tagged union, for a tag error), and
    whether the error is relevant: an alternative of `str | list` that the value's
    own type rules out reports errors that say nothing about the input.
    """
    schema = typed_schema()
    node = raw
    path: list[str | int] = []
    relevant = True
    for at, part in enumerate(loc):
        schema = inner(schema)
        kind = schema.get("type")
        if kind == "tagged-union":
            schema = schema["choices"].get(part, ANY)  # the tag names the variant
            continue
        if kind == "union" and isinstance(part, str) and part.startswith(ALTERNATIVE):
            choice = schema["choices"][int(part[len(ALTERNATIVE) :])][0]
            relevant = relevant and _may_be(inner(choice), node)
            schema = choice
            continue
        if kind == "typed-dict":
            spec = schema["fields"].get(part)
            schema = spec["schema"] if spec is not None else ANY
        elif kind == "list":
            schema = schema.get("items_schema", ANY)
        else:  # an open value (dict, any, ...): the rest of the location is raw
            for rest in loc[at:]:
                node = _step(node, rest, path)
            return tuple(path), ANY, relevant
        node = _step(node, part, path)
    return tuple(path), inner(schema), relevant


def _member_path(loc: tuple[Any, ...], routes: dict[tuple[Any, ...], tuple[int, ...]]) -> Path:
    """The path of an extra member from its error location, `_locate`'s result for it.

    Which parts of a location are union tags or labels (not in the input) depends on
    the schema alone, so it is found once per route (the location with its list
    positions blanked) and reused. An extra member is always in the input, and its
    error comes from a typed dict the value's own type reached (never from a ruled
    out alternative).
    """
    *within, member = loc  # the member's own name is always in the input
    route = tuple(None if type(part) is int else part for part in within)
    keep = routes.get(route)
    if keep is None:
        keep = routes[route] = _kept_parts(tuple(within))
    return (*(loc[at] for at in keep), member)


def _kept_parts(loc: tuple[Any, ...]) -> tuple[int, ...]:
    schema = typed_schema()
    keep: list[int] = []
    for at, part in enumerate(loc):
        schema = inner(schema)
        kind = schema.get("type")
        if kind == "tagged-union":
            schema = schema["choices"].get(part, ANY)
            continue
        if kind == "union" and isinstance(part, str) and part.startswith(ALTERNATIVE):
            schema = schema["choices"][int(part[len(ALTERNATIVE) :])][0]
            continue
        if kind == "typed-dict":
            spec = schema["fields"].get(part)
            schema = spec["schema"] if spec is not None else ANY
        elif kind == "list":
            schema = schema.get("items_schema", ANY)
        else:
            schema = ANY
        keep.append(at)
    return tuple(keep)


def _step(node: Any, part: Any, path: list[str | int]) -> Any:
    if isinstance(node, dict) and isinstance(part, str) and part in node:
        path.append(part)
        return node[part]
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        path.append(part)
        return node[part]
    return None


def _may_be(choice: dict[str, Any], value: Any) -> bool:
    """Whether `value`'s JSON type could be the alternative `choice` at all."""
    kind = choice.get("type")
    if kind == "str":
        return isinstance(value, str) or not isinstance(value, list)
    if kind == "list":
        return isinstance(value, list) or not isinstance(value, str)
    return True


def _text_tag(raw: Any, path: Path, union: dict[str, Any]) -> str | None:
    """The string tag of the element at `path` that `union` does not define, if a string.

    A `role` of 5 or null can name no variant, now or in a later version: that
    element is malformed, not unrecognised.
    """
    if union.get("type") != "tagged-union":
        return None
    element = _at(raw, path)
    tag = element.get(union["discriminator"]) if isinstance(element, dict) else None
    return tag if isinstance(tag, str) else None


def _tag_message(tag: str, name: str, choices: tuple[str, ...]) -> str:
    expected = ", ".join(f"'{c}'" for c in choices)
    return (
        f"Input tag {preview(tag)} found using '{name}' does not match any of the expected "
        f"tags: {expected}"
    )


def _not_text(element: Path, tag: str) -> tuple[str, str]:
    where = pointer(*element)
    return where, f"{where}: its union tag `{tag}` must be a string, not an array or object"


def _at(doc: Any, path: Path) -> Any:
    node = doc
    for part in path:
        node = node[part]
    return node


def _merged(found: Any) -> list[tuple[str, str]]:
    """One finding per location: a union's alternatives failing at one place are one problem."""
    by_where: dict[str, list[str]] = {}
    for where, message in found:
        messages = by_where.setdefault(where, [])
        if message not in messages:
            messages.append(message)
    return [(where, f"{where or '/'}: {'; or '.join(ms)}") for where, ms in by_where.items()]
