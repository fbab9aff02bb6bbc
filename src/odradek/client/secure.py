"""TLS and SASL for the blocking client (``client/connection.py``), from settings named
as librdkafka names them — what the ``odradek`` admin tools read from
``--command-config`` and ``-X`` (``cli/security.translate_client_config`` turns a Java
client's properties into these): ``security.protocol``, ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the broker's
host name; ``none`` does not), ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
``sasl.username``, ``sasl.password``.

SASL is Kafka's KIP-152 exchange: SaslHandshake v1 names the mechanism, then the
mechanism's tokens travel in SaslAuthenticate requests; SCRAM's client side is the
``scramp`` library's, as the broker's is.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from typing import Any

from odradek.client.codec import KafkaClientError

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
SPOKEN = {SASL_HANDSHAKE: (1, 1), SASL_AUTHENTICATE: (0, 2)}
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def protocol(settings: Mapping[str, str]) -> str:
    name = settings.get("security.protocol", "PLAINTEXT").upper()
    if name not in PROTOCOLS:
        raise KafkaClientError(f"security.protocol={name}: expected one of "
                               f"{', '.join(PROTOCOLS)}")
    return name


def tls_context(settings: Mapping[str, str]) -> ssl.SSLContext | None:
    """The client's TLS context for SSL and SASL_SSL (None for the others)."""
    if not protocol(settings).endswith("SSL"):
        return None
    try:
        context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
        if settings.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
            context.check_hostname = False
        certificate = settings.get("ssl.certificate.location")
        if certificate:
            context.load_cert_chain(certificate, settings.get("ssl.key.location"),
                                    settings.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaClientError(f"TLS settings: {exc}") from None
    return context


def login(request: Callable[[int, Mapping[str, Any]], Any], address: str,
          settings: Mapping[str, str]) -> None:
    """Authenticate a new connection (``request`` sends one request on it) when the
    protocol is SASL_PLAINTEXT or SASL_SSL; KafkaClientError when the broker refuses."""
    if not protocol(settings).startswith("SASL"):
        return
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))
    mechanism = mechanism.upper()
    if mechanism not in MECHANISMS:
        raise KafkaClientError(f"sasl.mechanism={mechanism}: this tool logs in with "
                               f"{', '.join(MECHANISMS)}")
    user, password = settings.get("sasl.username"), settings.get("sasl.password")
    if user is None or password is None:
        raise KafkaClientError(f"{mechanism} needs sasl.username and sasl.password")
    answer = request(SASL_HANDSHAKE, {"mechanism": mechanism})
    if answer.error_code:
        raise KafkaClientError(f"{address} does not accept SASL {mechanism} (it offers "
                               f"{', '.join(answer.mechanisms) or 'none'})")

    def exchange(token: bytes) -> bytes:
        reply = request(SASL_AUTHENTICATE, {"auth_bytes": token})
        if reply.error_code:
            raise KafkaClientError(f"cannot log in to {address} as {user}: "
                                   f"{reply.error_message or 'authentication failed'}")
        return bytes(reply.auth_bytes)

    if mechanism == "PLAIN":
        exchange(b"\0" + user.encode() + b"\0" + password.encode())
        return
    from scramp import ScramClient, ScramException

    client = ScramClient([mechanism], user, password)
    try:
        client.set_server_first(exchange(client.get_client_first().encode()).decode())
        client.set_server_final(exchange(client.get_client_final().encode()).decode())
    except ScramException as exc:
        raise KafkaClientError(f"SCRAM with {address}: {exc}") from None
