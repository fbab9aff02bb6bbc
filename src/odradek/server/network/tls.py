"""TLS for the SSL and SASL_SSL listeners: the server's ``ssl.SSLContext`` built from
Kafka's ``ssl.*`` settings (PEM keystore and truststore, per listener through
``listener.name.<listener>.ssl.*``), and the principal of a client certificate.

The principal is the certificate subject's distinguished name as Java prints it
(RFC 2253: most specific first, ``CN=alice,OU=eng,O=example``), mapped by
``ssl.principal.mapping.rules`` (Kafka's ``RULE:pattern/replacement/[LU]`` and
``DEFAULT``), then prefixed ``User:`` as Kafka's DefaultKafkaPrincipalBuilder does.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.server.config import BrokerConfig
from odradek.server.settings import ConfigError

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                "required": ssl.CERT_REQUIRED}
# getpeercert()'s attribute names -> the keys of an RFC 2253 name, as Java prints them.
_DN_KEYS = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
            "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
            "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
            "emailAddress": "EMAILADDRESS"}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The SSLContext of one TLS listener; ConfigError names what is missing or wrong."""
    def get(name: str) -> Any:
        return config.for_listener(listener, name)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [v for v in str(get("ssl.enabled.protocols")).split(",") if v]
    unknown = [v for v in versions if v not in _PROTOCOLS]
    if unknown or not versions:
        raise ConfigError(f"ssl.enabled.protocols: {', '.join(unknown) or 'none'} not "
                          f"supported; choose from {', '.join(_PROTOCOLS)}")
    ctx.minimum_version = min(_PROTOCOLS[v] for v in versions)
    ctx.maximum_version = max(_PROTOCOLS[v] for v in versions)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            ctx.set_ciphers(ciphers.replace(",", ":"))
        except ssl.SSLError as exc:
            raise ConfigError(f"ssl.cipher.suites {ciphers!r}: {exc}") from None
    load_keystore(ctx, listener, get)
    ctx.verify_mode = _CLIENT_AUTH[get("ssl.client.auth")]
    trust_file, trust_text = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    if trust_file or trust_text:
        try:
            ctx.load_verify_locations(cafile=trust_file or None, cadata=trust_text or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"listener {listener}: cannot load the truststore: {exc}") from None
    elif ctx.verify_mode != ssl.CERT_NONE:
        raise ConfigError(f"listener {listener}: ssl.client.auth={get('ssl.client.auth')} "
                          "needs ssl.truststore.location or ssl.truststore.certificates")
    principal_rules(get("ssl.principal.mapping.rules"))  # refuse bad rules at start
    return ctx


def send_handshake_alerts() -> None:
    """Make a failed server-side TLS handshake send its alert before the connection closes.

    asyncio (CPython 3.11) aborts the transport when the handshake fails - a client
    certificate missing, expired or from an unknown CA - with the alert OpenSSL made
    still in its outgoing buffer: the client sees the connection closed, not why, and
    retries until it times out. Kafka's brokers send the alert, and Kafka's clients
    report it (the Java client's SslAuthenticationException). This flushes what OpenSSL
    wrote before asyncio's own handling goes on; installed once per process, and left
    out if asyncio's internals are not the ones it knows."""
    from asyncio import sslproto

    protocol = sslproto.SSLProtocol
    original = getattr(protocol, "_on_handshake_complete", None)
    if (original is None or not hasattr(protocol, "_process_outgoing")
            or getattr(original, "sends_alerts", False)):
        return

    def _on_handshake_complete(self: Any, handshake_exc: BaseException | None) -> None:
        if handshake_exc is not None:
            # The alert, written while the socket is open (the close follows regardless).
            with contextlib.suppress(Exception):
                self._process_outgoing()
        original(self, handshake_exc)

    # A marker set on a function and a method replaced on a class: mypy types neither.
    _on_handshake_complete.sends_alerts = True  # type: ignore[attr-defined]
    protocol._on_handshake_complete = _on_handshake_complete  # type: ignore[method-assign]


def load_keystore(ctx: ssl.SSLContext, listener: str, get: Callable[[str], Any]) -> None:
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    password = get("ssl.key.password") or None
    if not location and not (chain and key):
        raise ConfigError(f"listener {listener} is TLS and needs ssl.keystore.location (a PEM "
                          "file with key and certificates) or ssl.keystore.certificate.chain "
                          "and ssl.keystore.key")
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
            return
        # load_cert_chain takes files only: the PEM text goes through a private temporary
        # file, removed at once.
        fd, path = tempfile.mkstemp(prefix="odradek-keystore-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(f"{key.strip()}\n{chain.strip()}\n")
            ctx.load_cert_chain(path, password=password)
        finally:
            os.unlink(path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the keystore: {exc}") from None


# --- principals ---------------------------------------------------------------------------


def distinguished_name(cert: dict[str, Any]) -> str:
    """RFC 2253 form of a ``getpeercert()`` subject (most specific attribute first)."""
    parts = []
    for rdn in reversed(cert.get("subject", ())):
        parts.append("+".join(f"{_DN_KEYS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(parts)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT (the whole DN)
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        out = self.pattern.sub(self.replacement, dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


_RULE = re.compile(r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)")


@functools.lru_cache(maxsize=16)
def principal_rules(text: str) -> tuple[_Rule, ...]:
    """Kafka's ``ssl.principal.mapping.rules``: comma-separated ``DEFAULT`` or
    ``RULE:regex/replacement/[L|U]`` ($1 in a replacement is the first group)."""
    rules: list[_Rule] = []
    rest = text.strip()
    while rest:
        if rest.startswith("DEFAULT"):
            rules.append(_Rule(None))
            rest = rest[len("DEFAULT"):]
        else:
            m = _RULE.match(rest)
            if m is None:
                raise ConfigError(f"ssl.principal.mapping.rules: cannot read {rest!r}")
            try:
                pattern = re.compile(m.group(1).replace("\\/", "/"))
            except re.error as exc:
                raise ConfigError(f"ssl.principal.mapping.rules: {exc}") from None
            replacement = re.sub(r"\$(\d+)", r"\\\1", m.group(2).replace("\\/", "/"))
            rules.append(_Rule(pattern, replacement, m.group(3)))
            rest = rest[m.end():]
        rest = rest.strip()
        if rest.startswith(","):
            rest = rest[1:].strip()
        elif rest:
            raise ConfigError(f"ssl.principal.mapping.rules: expected ',' before {rest!r}")
    return tuple(rules)  # cached: parsed once, not per TLS connection


def map_principal(dn: str, rules: tuple[_Rule, ...]) -> str:
    """The user name the first matching rule makes of ``dn`` (the DN itself if none)."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    return dn
