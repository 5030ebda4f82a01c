"""The SASL initial responses that carry an OAuth 2.0 bearer token to IMAP and SMTP. Pure functions.

XOAUTH2 is Google's mechanism (also spoken by Microsoft and Dovecot); OAUTHBEARER is its standard successor
(RFC 7628 §3.1). Both are sent base64-encoded by the protocol layer (imapclient, or our SMTP AUTH command); the
strings hold the token, so they are never logged.
"""

from __future__ import annotations

import base64


def xoauth2(user: str, token: str) -> str:
    """``user=U^Aauth=Bearer T^A^A`` (Google's XOAUTH2 format)."""
    return f"user={user}\x01auth=Bearer {token}\x01\x01"


def oauthbearer(user: str, token: str, host: str = "", port: int = 0) -> str:
    """RFC 7628 §3.1: a GS2 header naming the authorization identity (``=`` and ``,`` escaped, RFC 5801 §4), then
    key-value pairs separated by ^A; host and port are optional."""
    authzid = user.replace("=", "=3D").replace(",", "=2C")
    pairs = ([f"host={host}"] if host else []) + ([f"port={port}"] if port else []) + [f"auth=Bearer {token}"]
    return f"n,a={authzid},\x01" + "\x01".join(pairs) + "\x01\x01"


def initial_response(mechanism: str, user: str, token: str, host: str = "", port: int = 0) -> str:
    """The mechanism's initial client response, as text."""
    return oauthbearer(user, token, host, port) if mechanism == "oauthbearer" else xoauth2(user, token)


def encoded(text: str) -> str:
    """``text`` base64-encoded, as SMTP AUTH carries it (RFC 4954 §4)."""
    return base64.b64encode(text.encode()).decode()
