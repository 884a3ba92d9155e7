"""Who sent a request, as the shell verified it.

The core never verifies anything: the shell checks a token, a client certificate
or a signature and hands the judge an `Identity` (or None: nobody verified).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified caller: its subject, the groups or roles it holds, and who vouched.

    `issuer` is the token's issuer (or the certificate's); `signer` the key id whose
    signature carried the identity onto the record ("" when the gateway itself saw it).
    """

    subject: str
    groups: tuple[str, ...] = ()
    issuer: str = ""
    signer: str = ""
