"""The command line: version, generated help."""

from __future__ import annotations

import pytest

from gateway import __version__, cli
from gateway.settings import Settings, setting_fields


def test_version(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["--version"])
    assert raised.value.code == 0
    assert capsys.readouterr().out.strip() == f"agui-gateway {__version__}"


def test_run_help_lists_every_setting_with_its_variable_default_and_meaning(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = capsys.readouterr().out
    fields = list(setting_fields())
    assert len(fields) == len(Settings.model_fields)
    for _, env, default, description in fields:
        shown = "none" if default is None else str(default)
        assert f"  {env} (default: {shown})\n      {description}\n" in text + "\n"


@pytest.mark.parametrize("command", [["topics", "create", "--agent", "a"], ["run"], ["edge"]])
def test_a_password_written_as_a_number_is_not_echoed(command, monkeypatch, tmp_path, capsys):
    path = tmp_path / "gateway.toml"
    path.write_text(
        "sasl_plain_password = 1786483309117\n"
        '[bridge_default]\nurl = "http://a/"\nheaders = { Authorization = 4242424242 }\n'
    )
    monkeypatch.setenv("AGUI_GATEWAY_CONFIG_FILE", str(path))
    assert cli.main(command) == 2
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert "sasl_plain_password" in shown and "bridge_default.headers.Authorization" in shown
    assert "1786483309117" not in shown and "4242424242" not in shown
