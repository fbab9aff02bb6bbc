"""Who is on the other end of a connection: the listener it came in on, the client's
address, and the principal (Kafka's ``User:NAME``) the listener's security established -
``User:ANONYMOUS`` on PLAINTEXT and on TLS without a client certificate, the certificate's
mapped name with mutual TLS, the SASL user once authenticated. Handlers read it from
``request.session`` (for the advertised endpoints of that listener, and for authorization).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from odradek.server.config import BrokerConfig, Listener

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    listener: Listener
    client_host: str
    principal: str = ANONYMOUS
    # SASL listeners: False until SaslAuthenticate succeeds; no other request is served
    # before (Kafka closes such a connection).
    authenticated: bool = True
    mechanism: str | None = None  # the SASL mechanism the client chose
    authenticator: Any = None  # the SASL exchange in progress (security.sasl)
    expires_at: float | None = None  # monotonic; connections.max.reauth.ms (KIP-368)
    raw_sasl: bool = False  # after SaslHandshake v0: tokens come as bare frames
    # Logged in with a delegation token (KIP-48): such a session may not create, renew,
    # expire or describe tokens, as in Kafka.
    token_authenticated: bool = False
    # Set by a handler whose answer must be the connection's last (a failed login, an
    # unsupported mechanism): the reason, logged when the connection closes.
    close_after_response: str | None = None
    # Client quotas (server.security.quotas): the throttle the response being made earns (its
    # throttle_time_ms; the connection is muted that long after sending it), the
    # monotonic time the mute ends (0.0: not muted), and the quotas of this client as
    # last resolved (quotas version, client id, Limits).
    throttle_ms: int = 0
    muted_until: float = 0.0
    quota_limits: Any = None

    def complete(self, user: str, config: BrokerConfig, authenticator: Any) -> int:
        """``authenticator``'s exchange succeeded for ``user``: the session is
        authenticated as ``User:<user>``; returns its lifetime in ms, 0 for none.

        The lifetime is connections.max.reauth.ms of the listener, and for a credential
        that expires (an OAUTHBEARER token's ``credential_expires_at_ms``) the time left
        until it does if that is sooner - even without connections.max.reauth.ms, as
        Kafka's SaslServerAuthenticator (a delegation token's expiry too); an
        already-expired token (inside the clock skew) gets 0 left, and its session ends
        at the next request."""
        self.principal = f"User:{user}"
        self.authenticated = True
        self.token_authenticated = bool(getattr(authenticator, "token_authenticated", False))
        self.authenticator = None
        self.raw_sasl = False
        lifetime = int(config.for_listener(self.listener.name, "connections.max.reauth.ms"))
        expires_ms = getattr(authenticator, "credential_expires_at_ms", None)
        if expires_ms is not None:
            left = max(0, expires_ms - int(time.time() * 1000))
            lifetime = min(left, lifetime) if lifetime else left
            self.expires_at = time.monotonic() + lifetime / 1000
        else:
            self.expires_at = time.monotonic() + lifetime / 1000 if lifetime else None
        return lifetime

    def may_send(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` may not be served now (None: it may): before
        authentication only the SASL APIs and ApiVersions; after the session's lifetime
        only a re-authentication."""
        if api_key in SASL_APIS:
            return None
        if not self.authenticated:
            return f"unexpected request (API key {api_key}) before SASL authentication"
        if self.expires_at is not None and time.monotonic() > self.expires_at:
            return "the SASL session expired (connections.max.reauth.ms) without re-authentication"
        return None


SASL_APIS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate
