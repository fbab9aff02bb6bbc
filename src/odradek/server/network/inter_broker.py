"""How this broker connects to the others (follower fetchers, transaction markers):
over the inter-broker listener (``inter.broker.listener.name``) and its security, as a
Kafka broker does.

- SSL / SASL_SSL: TLS trusting the listener's truststore (``ssl.truststore.location`` or
  ``ssl.truststore.certificates``, per listener through ``listener.name.<name>.``),
  checking the other broker's host name when ``ssl.endpoint.identification.algorithm``
  is ``https`` (Kafka's default), and presenting the listener's keystore as this
  broker's certificate (what a listener with ``ssl.client.auth=required`` asks).
- SASL_PLAINTEXT / SASL_SSL: ``sasl.mechanism.inter.broker.protocol`` (PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512), logging in with the ``username`` and ``password`` of
  that mechanism's JAAS line on the listener
  (``listener.name.<name>.<mechanism>.sasl.jaas.config``), as Kafka's brokers do. A
  SCRAM broker user must exist before the brokers talk (``odradek users add`` through
  one broker, with PLAIN or another listener).

Errors in these settings stop start-up (ConfigError), not the first replica fetch.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.client.aio import AsyncBrokerConnection
from odradek.client.secure import MECHANISMS, SaslLogin
from odradek.security.sasl import parse_jaas
from odradek.server.config import BrokerConfig
from odradek.server.network.tls import load_keystore
from odradek.server.settings import ConfigError


@dataclass(frozen=True)
class InterBrokerClient:
    """The TLS context and SASL login of this broker's connections to the others."""

    listener: str
    tls: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    async def open(self, host: str, port: int, *, client_id: str, timeout_s: float,
                   versions: Mapping[int, tuple[int, int]] | None = None
                   ) -> AsyncBrokerConnection:
        return await AsyncBrokerConnection.open(host, port, client_id=client_id,
                                                timeout_s=timeout_s, versions=versions,
                                                tls=self.tls, sasl=self.sasl)


def inter_broker_client(config: BrokerConfig) -> InterBrokerClient:
    name = config.inter_broker_listener
    listener = next(lst for lst in config.listeners if lst.name == name)

    def get(setting: str) -> str:
        return config.for_listener(name, setting) or ""

    tls = None
    if listener.tls:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls.check_hostname = get("ssl.endpoint.identification.algorithm").lower() == "https"
        trust_file, trust_text = get("ssl.truststore.location"), get("ssl.truststore.certificates")
        try:
            if trust_file or trust_text:
                tls.load_verify_locations(cafile=trust_file or None, cadata=trust_text or None)
            else:
                tls.load_default_certs()
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"inter-broker listener {name}: cannot load the truststore: "
                              f"{exc}") from None
        load_keystore(tls, name, get)
    sasl = None
    if listener.sasl:
        mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).upper()
        if mechanism not in MECHANISMS:
            raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism}: brokers "
                              f"log in to each other with {', '.join(MECHANISMS)}")
        jaas_name = f"{mechanism.lower()}.sasl.jaas.config"
        jaas = get(jaas_name)
        options = parse_jaas(jaas)[1] if jaas else {}
        if "username" not in options or "password" not in options:
            raise ConfigError(f"the inter-broker listener {name} uses SASL {mechanism}: give "
                              f"listener.name.{name.lower()}.{jaas_name} the broker's own "
                              'username="..." and password="..."')
        sasl = SaslLogin(mechanism, options["username"], options["password"])
    return InterBrokerClient(name, tls, sasl)
