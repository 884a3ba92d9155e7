"""`agui-gateway keys`: a new signing key for attesting identities on request records.

Writes the Ed25519 private key (PEM, PKCS#8) to a new file readable by its owner only,
never over an existing one, and prints the TOML line that makes a gateway trust it
(`attest_trusted_keys`). The private key is never printed.
"""

from __future__ import annotations

import json
import os
import sys

from gateway.kafka.wire.attestation import generate_key


def main(key_id: str, out: str) -> int:
    if not key_id.strip():
        print("agui-gateway keys: --key-id must not be empty", file=sys.stderr)
        return 2
    pem, public = generate_key()
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"agui-gateway keys: {out} exists; not overwritten", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"agui-gateway keys: cannot write {out}: {exc.strerror}", file=sys.stderr)
        return 2
    with os.fdopen(fd, "wb") as file:
        file.write(pem)
    print(f"# the signer's settings: attest_key_id = {json.dumps(key_id)}, ", end="")
    print(f"attest_private_key_file = {json.dumps(out)}")
    print("# the gateway's, under [attest_trusted_keys] (or in attest_trusted_keys_file):")
    print(f"{json.dumps(key_id)} = {json.dumps(public)}")
    return 0
