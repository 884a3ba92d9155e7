"""The verdicts of the 1 MB hostile shapes, held to what they were before their reading
was made cheaper (docs/concepts/limits.md, "CPU per record").

`tests/core/golden/floods.json` was written by `python -m tests.core.test_flood_verdicts`
on the code before the change: each shape's verdict, every reason and warning (code,
detail, path, interrupt id) and a digest of the forward's bytes. A faster reading must
decide exactly that: the same verdict, the same reason codes, the same first 50 findings
listed and the same count of the rest, the same bytes forwarded.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.codec.records import decode_json, forward_bytes
from gateway.core import judge
from tests.core.hostile import REQUEST_MALFORMED, REQUEST_MORE, THREAD, interrupted_with

GOLDEN = Path(__file__).parent / "golden" / "floods.json"
SHAPES = {**REQUEST_MORE, **REQUEST_MALFORMED}


def decided(name: str) -> dict[str, Any]:
    """What the service decides for the shape `name`: its verdict, findings and forward."""
    schema, build = SHAPES[name]
    data = build()
    decision, _ = judge(interrupted_with(schema), decode_json(data), 10, thread_id=THREAD)
    decision, forward = forward_bytes(decision, data)
    return {
        "verdict": str(decision.verdict),
        "reasons": [r.to_json() for r in decision.reasons],
        "warnings": [w.to_json() for w in decision.warnings],
        "forward": None if forward is None else hashlib.blake2b(forward).hexdigest(),
    }


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def test_every_shape_is_held():
    assert set(json.loads(GOLDEN.read_text())) == set(SHAPES)


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_verdict_and_findings_are_what_they_were(name, golden):
    before = golden[name]
    now = decided(name)
    assert now["verdict"] == before["verdict"]
    assert [r["code"] for r in now["reasons"]] == [r["code"] for r in before["reasons"]]
    assert [w["code"] for w in now["warnings"]] == [w["code"] for w in before["warnings"]]
    assert now["reasons"][:5] == before["reasons"][:5]  # the first listed, read first
    assert now == before


def main() -> None:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({name: decided(name) for name in SHAPES}, indent=1) + "\n")


if __name__ == "__main__":
    main()
