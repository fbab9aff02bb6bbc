"""TLS and SASL for Odradek's own clients. The SASL exchange (``login_steps``) is shared
by the blocking connection (``client/connection.py``) and the asyncio one brokers use
with each other (``client/aio.py``, set up from the broker's inter-broker listener by
``server/network/tls.py``). The blocking client takes its settings named as librdkafka names
them — what the ``odradek`` admin tools read from ``--command-config`` and ``-X``
(``cli/security.translate_client_config`` turns a Java
client's properties into these): ``security.protocol``, ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the broker's
host name; ``none`` does not), ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
``sasl.username``, ``sasl.password``; and Odradek's own ``sasl.tokenauth=true`` (SCRAM
with a delegation token: its id and HMAC as username and password, as the Java client's
ScramLoginModule ``tokenauth="true"``).

SASL is Kafka's KIP-152 exchange: SaslHandshake v1 names the mechanism, then the
mechanism's tokens travel in SaslAuthenticate requests; SCRAM's client side is the
``scramp`` library's, as the broker's is.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class SaslLogin:
    """Who a connection logs in as, and how."""

    mechanism: str
    username: str
    password: str = field(repr=False)
    # SCRAM with a delegation token (KIP-48): the username is the token's id, the
    # password its HMAC, and the client-first message carries ``tokenauth=true``.
    token: bool = False

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise KafkaClientError(f"sasl.mechanism={self.mechanism}: Odradek's clients log "
                                   f"in with {', '.join(MECHANISMS)}")


def sasl_login(settings: Mapping[str, str]) -> SaslLogin | None:
    """The SASL login the settings ask for (None: the protocol is not SASL)."""
    if not protocol(settings).startswith("SASL"):
        return None
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))
    user, password = settings.get("sasl.username"), settings.get("sasl.password")
    if user is None or password is None:
        raise KafkaClientError(f"{mechanism.upper()} needs sasl.username and sasl.password")
    return SaslLogin(mechanism.upper(), user, password,
                     settings.get("sasl.tokenauth", "false").lower() == "true")


# One request of the exchange: (API key, request data); the step is sent its answer.
Step = tuple[int, Mapping[str, Any]]


def login_steps(login: SaslLogin, address: str) -> Generator[Step, Any, None]:
    """The SASL exchange as requests to send, each sent back its answer (so that the
    blocking and the asyncio connection share it); KafkaClientError when refused."""
    answer = yield SASL_HANDSHAKE, {"mechanism": login.mechanism}
    if answer.error_code:
        raise KafkaClientError(f"{address} does not accept SASL {login.mechanism} (it "
                               f"offers {', '.join(answer.mechanisms) or 'none'})")

    def exchange(token: bytes) -> Generator[Step, Any, bytes]:
        reply = yield SASL_AUTHENTICATE, {"auth_bytes": token}
        if reply.error_code:
            raise KafkaClientError(f"cannot log in to {address} as {login.username}: "
                                   f"{reply.error_message or 'authentication failed'}")
        return bytes(reply.auth_bytes)

    if login.mechanism == "PLAIN":
        yield from exchange(b"\0" + login.username.encode() + b"\0" + login.password.encode())
        return
    from scramp import ScramClient, ScramException

    client = ScramClient([login.mechanism], login.username, login.password)
    client_first = client.get_client_first()
    if login.token:  # Kafka's extension; the proof covers the message as sent
        client_first += ",tokenauth=true"
        client.client_first_bare = client_first.split(",", 2)[2]
    server_first = yield from exchange(client_first.encode())
    try:
        client.set_server_first(server_first.decode())
        server_final = yield from exchange(client.get_client_final().encode())
        client.set_server_final(server_final.decode())
    except ScramException as exc:
        raise KafkaClientError(f"SCRAM with {address}: {exc}") from None


def login(request: Callable[[int, Mapping[str, Any]], Any], address: str,
          settings: Mapping[str, str]) -> None:
    """Authenticate a new blocking connection (``request`` sends one request on it)
    when the settings' protocol is SASL_PLAINTEXT or SASL_SSL."""
    sasl = sasl_login(settings)
    if sasl is None:
        return
    steps = login_steps(sasl, address)
    try:
        step = next(steps)
        while True:
            step = steps.send(request(*step))
    except StopIteration:
        pass
