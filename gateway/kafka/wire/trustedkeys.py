"""The gateway's trusted public keys, by key id: the settings' and a file's.

The settings' `attest_trusted_keys` are read once; `attest_trusted_keys_file` (a JSON
object or TOML, key id = public key) is read again when it changes (its modification
time or size, looked at most every `attest_keys_reload_s`), so keys rotate without a
restart. A key or file that cannot be read at start is an `AttestationError`; a file
broken later keeps the keys it gave last, and is logged once per change.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

log = logging.getLogger("gateway.attestation")


class AttestationError(ValueError):
    """A key that cannot be read, or an identity that cannot be written."""


def public_key(text: str) -> Ed25519PublicKey:
    """An Ed25519 public key from base64 of its 32 raw bytes, or a PEM
    (SubjectPublicKeyInfo); ValueError otherwise."""
    stripped = text.strip()
    if stripped.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(stripped.encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("not an Ed25519 public key")
        return key
    try:
        raw = base64.b64decode(stripped, validate=True)
    except binascii.Error:
        raise ValueError("neither a PEM public key nor base64") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key is 32 bytes, not {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


class TrustedKeys:
    """The public keys the gateway believes, by key id."""

    def __init__(
        self,
        trusted: Mapping[str, str],
        key_file: Path | None = None,
        reload_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._static = _parse_keys(trusted, "trusted key")
        self._file = key_file
        self._reload_s = reload_s
        self._clock = clock
        self._seen: tuple[int, int] | None = None
        self._next_look = clock() + reload_s
        file_keys: dict[str, Ed25519PublicKey] = {}
        if key_file is not None:
            try:
                self._seen = _stamp(key_file)
            except OSError as exc:
                raise AttestationError(f"the trusted keys file {str(key_file)!r}: {exc}") from None
            file_keys = _parse_keys(_read_key_file(key_file), f"{key_file}: key")
        self._keys = {**self._static, **file_keys}

    def _look(self) -> None:
        """Read the key file again if it changed since it was last read."""
        assert self._file is not None
        self._next_look = self._clock() + self._reload_s
        stamp: tuple[int, int] | None = None
        try:
            stamp = _stamp(self._file)
            if stamp == self._seen:
                return
            file_keys = _parse_keys(_read_key_file(self._file), f"{self._file}: key")
        except (OSError, AttestationError) as exc:
            self._seen = stamp  # said once per change of the file, not at every look
            log.error(
                "trusted keys file not reloaded; keeping the keys read before",
                extra={"file": str(self._file), "error": str(exc)},
            )
            return
        self._seen = stamp
        self._keys = {**self._static, **file_keys}
        log.info(
            "trusted keys reloaded", extra={"file": str(self._file), "keys": sorted(self._keys)}
        )

    def get(self, key_id: str) -> Ed25519PublicKey | None:
        """The key of `key_id` (looking at the file first when a look is due)."""
        if self._file is not None and self._clock() >= self._next_look:
            self._look()
        return self._keys.get(key_id)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)


def _parse_keys(trusted: Mapping[str, Any], what: str) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    problems = []
    for key_id, text in trusted.items():
        try:
            if not isinstance(text, str):
                raise ValueError("not a string")
            keys[key_id] = public_key(text)
        except ValueError as exc:
            problems.append(f"{what} {key_id!r}: {exc}")
    if problems:
        raise AttestationError("; ".join(problems))
    return keys


def _stamp(path: Path) -> tuple[int, int]:
    found = path.stat()
    return found.st_mtime_ns, found.st_size


def _read_key_file(path: Path) -> dict[str, Any]:
    """A trusted keys file: a JSON object, or TOML (key id = public key)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise AttestationError(
            f"the trusted keys file {str(path)!r} cannot be read: {exc}"
        ) from None
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise AttestationError(
            f"the trusted keys file {str(path)!r} is neither a JSON object nor TOML: {exc}"
        ) from None
    if not isinstance(doc, dict):
        raise AttestationError(f"the trusted keys file {str(path)!r} is not an object")
    return doc
