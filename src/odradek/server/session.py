"""Who is on the other end of a connection: the listener it came in on, the client's
address, and the principal (Kafka's ``User:NAME``) the listener's security established -
``User:ANONYMOUS`` on PLAINTEXT and on TLS without a client certificate, the certificate's
mapped name with mutual TLS, the SASL user once authenticated. Handlers read it from
``request.session`` (for the advertised endpoints of that listener, and for authorization).
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.server.config import Listener

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
    expires_at: float | None = None  # monotonic; connections.max.reauth.ms (KIP-368)
