"""The long-lived commands' event loop (`event_loop`): Python's own unless uvloop is asked
for, and Python's own where uvloop cannot be imported."""

from __future__ import annotations

import asyncio
import builtins
import logging

import pytest

from gateway.commands import lifecycle
from gateway.settings import Settings


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_commands_run_on_python_s_own_loop_by_default() -> None:
    assert Settings().event_loop == "asyncio"
    assert lifecycle.run_loop(Settings(), loop_module()) == "asyncio.unix_events"


def test_uvloop_when_asked() -> None:
    assert lifecycle.run_loop(Settings(event_loop="uvloop"), loop_module()).startswith("uvloop")


def test_python_s_own_loop_with_a_warning_where_uvloop_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = builtins.__import__

    def no_uvloop(name: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    with caplog.at_level(logging.WARNING, logger="gateway.service"):
        uvloop = Settings(event_loop="uvloop")
        assert lifecycle.run_loop(uvloop, loop_module()) == "asyncio.unix_events"
    assert "event_loop uvloop cannot be imported" in caplog.text
