"""OAuth 2.0 for IMAP and SMTP (issue 33): the token file, the provider's endpoints, renewal, and sign-in.

``TokenSource`` hands the mail clients an access token (renewed before expiry and on a refused login);
``sasl`` builds the XOAUTH2/OAUTHBEARER strings; ``login`` runs `quinn auth login`; ``presets`` names the
providers' endpoints for `quinn init --provider`.
"""

from quinn.oauth.check import check_tokens
from quinn.oauth.endpoints import LoginRefused, OAuthClient, TokenRefused
from quinn.oauth.login import device_login, loopback_login, save_login
from quinn.oauth.sasl import encoded, initial_response, oauthbearer, xoauth2
from quinn.oauth.source import LOGIN_HINT, LoginNeeded, TokenSource, token_source
from quinn.oauth.tokens import TokenFile, TokenSet

__all__ = [
    "LOGIN_HINT", "LoginNeeded", "LoginRefused", "OAuthClient", "TokenFile", "TokenRefused", "TokenSet",
    "TokenSource", "check_tokens", "device_login", "encoded", "initial_response", "loopback_login", "oauthbearer",
    "save_login", "token_source", "xoauth2",
]  # fmt: skip
