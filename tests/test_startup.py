"""What a command imports at start-up: nothing it does not use by default.

A gateway started to take over decides nothing until its imports are done
(docs/benchmarks/speed.md, "Start-up"). Each case imports a command's module in a fresh
interpreter and lists the modules it must not have loaded.
"""

from __future__ import annotations

import pytest

from tests.imports import loaded_by, under

CASES = {
    # the inbox (JWT verification, an HTTP client, its page) is off by default
    "gateway.commands.run": ("gateway.inbox", "joserfc", "httpx"),
    # the core's codes and values without the protocol's models
    "gateway.core.values.codes": ("ag_ui", "gateway.core.requests", "gateway.core.events"),
    "gateway.core.values.findings": ("ag_ui", "gateway.core.requests", "gateway.core.events"),
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_a_command_imports_only_what_it_uses(module: str) -> None:
    loaded = loaded_by(module)
    assert module in loaded
    unwanted = [name for package in CASES[module] for name in under(loaded, package)]
    assert unwanted == [], unwanted


def test_the_cores_names_are_there_when_asked_for() -> None:
    import gateway.core as core

    assert sorted(core._WHERE) == sorted(core.__all__)  # the names it says where to find
    for name in core.__all__:
        assert getattr(core, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        core.no_such_name  # noqa: B018
