"""`agui-gateway keys`: a new signing key, written for its owner only and never over an
existing file; the printed line makes a gateway trust exactly that key."""

from __future__ import annotations

import stat
import tomllib

from gateway.cli import main
from gateway.core import Identity
from gateway.kafka.wire.attestation import Signer, Verifier


def test_a_new_key_and_the_line_that_trusts_it(tmp_path, capsys):
    out = tmp_path / "edge.pem"
    assert main(["keys", "--key-id", "edge-2026-01", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "PRIVATE KEY" not in printed
    trusted = tomllib.loads(printed)  # comments, and the one line to add
    assert list(trusted) == ["edge-2026-01"]
    signer = Signer.from_file("edge-2026-01", out)
    headers = signer.headers(Identity("alice"), b"bot", b"t1", b"c1", b"{}")
    record = [("agui-agent", b"bot"), ("agui-correlation-id", b"c1"), *headers]
    assert Verifier(trusted).verify(record, b"t1", b"{}") == Identity(
        "alice", signer="edge-2026-01"
    )


def test_an_existing_file_is_never_overwritten(tmp_path, capsys):
    out = tmp_path / "edge.pem"
    out.write_text("keep me")
    assert main(["keys", "--key-id", "k", "--out", str(out)]) == 2
    assert out.read_text() == "keep me"
    assert "exists; not overwritten" in capsys.readouterr().err
