"""Listener settings and TLS principals (issue 18), in process: Kafka's ``listeners`` /
``advertised.listeners`` / ``listener.security.protocol.map`` / ``listener.name.*``
checked at start-up with errors that name the setting, secrets hidden in the banner, and
the principal a mutual-TLS client gets (its certificate's distinguished name, mapped by
``ssl.principal.mapping.rules``) seen on the broker's side of a real handshake."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest

from odradek.devcluster.certs import TestCA
from odradek.server.config import HIDDEN, load_config
from odradek.server.network.tls import map_principal, principal_rules
from odradek.server.settings import ConfigError
from odradek.testing import running_broker


def config(listen: str | None = None, **settings: str):  # type: ignore[no-untyped-def]
    return load_config(listen=listen, overrides=settings, environ={})


def test_listeners_with_their_security_protocols_and_the_main_one_first():
    cfg = config(**{"listeners": "CLIENT://:9093,INTERNAL://127.0.0.1:9094",
                    "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT",
                    "inter.broker.listener.name": "INTERNAL",
                    "advertised.listeners": "CLIENT://kafka.example.com:9093"})
    assert [(x.name, x.protocol, x.host, x.port) for x in cfg.listeners] == [
        ("CLIENT", "SASL_SSL", "", 9093), ("INTERNAL", "PLAINTEXT", "127.0.0.1", 9094)]
    assert cfg.listeners[0].tls and cfg.listeners[0].sasl
    assert cfg.inter_broker_listener == "INTERNAL"
    assert cfg.advertised_by_listener == {"CLIENT": ("kafka.example.com", 9093)}
    # --listen picks the main listener among them.
    assert config("127.0.0.1:9094", listeners="PLAINTEXT://:9093,SSL://127.0.0.1:9094"
                  ).listeners[0].name == "SSL"
    # Without listeners: one PLAINTEXT listener on --listen.
    [only] = config("127.0.0.1:9500").listeners
    assert (only.name, only.protocol, only.port) == ("PLAINTEXT", "PLAINTEXT", 9500)


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";')


def test_brokers_connect_to_each_other_with_the_inter_broker_listeners_security(
        tmp_path: Path):
    """The inter-broker listener's TLS (its truststore; its keystore as the broker's own
    certificate; host names checked unless ssl.endpoint.identification.algorithm is
    empty) and SASL (sasl.mechanism.inter.broker.protocol, with the username and
    password of that mechanism's JAAS line on the listener)."""
    from odradek.server.network.inter_broker import inter_broker_client

    ca = TestCA(tmp_path / "ca")
    keystore = ca.issue("broker", "CN=broker", server=True).keystore()
    plain = inter_broker_client(config(listeners="PLAINTEXT://:9092"))
    assert (plain.listener, plain.tls, plain.sasl) == ("PLAINTEXT", None, None)
    secured = inter_broker_client(config(**{
        "listeners": "PLAINTEXT://:9092,SASL_SSL://:9094",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.ssl.keystore.location": str(keystore),
        "listener.name.sasl_ssl.ssl.truststore.location": str(ca.cert)}))
    assert secured.tls is not None and secured.tls.check_hostname
    assert secured.tls.verify_mode == ssl.CERT_REQUIRED
    assert secured.sasl is not None
    assert (secured.sasl.mechanism, secured.sasl.username) == ("PLAIN", "broker")
    assert "broker-secret" not in repr(secured)
    no_host_check = inter_broker_client(config(**{
        "listeners": "SSL://:9093", "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(ca.cert), "ssl.endpoint.identification.algorithm": ""}))
    assert no_host_check.tls is not None and not no_host_check.tls.check_hostname


@pytest.mark.parametrize("settings,message", [
    ({"sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"},
     "brokers log in to each other with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config":
      'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'},
     'give listener.name.sasl_plaintext.plain.sasl.jaas.config the broker\'s own username'),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
     "scram-sha-512.sasl.jaas.config"),
])
def test_inter_broker_login_settings_that_cannot_work_stop_the_start(settings, message):
    from odradek.server.network.inter_broker import inter_broker_client

    with pytest.raises(ConfigError, match=message):
        inter_broker_client(config(**{"listeners": "SASL_PLAINTEXT://:9095",
                                      "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                                      JAAS, **settings}))


@pytest.mark.parametrize("settings,message", [
    ({"listeners": "CLIENT://:9093"}, "no security protocol for the listener"),
    ({"listeners": "PLAINTEXT://:9093,SSL://:9093"}, "uses a port twice"),
    ({"listeners": "PLAINTEXT://:9093,PLAINTEXT://:9094"}, "twice"),
    ({"listeners": "PLAINTEXT:9093"}, "NAME://HOST:PORT"),
    ({"advertised.listeners": "SSL://h:1"}, "not a listener"),
    ({"inter.broker.listener.name": "SSL"}, "not a listener"),
    ({"listener.name.ssl.ssl.client.auth": "required"}, "not one of listeners"),
    ({"listener.name.plaintext.log.retention.ms": "1"}, "unknown setting"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "PLAINTEXT, SSL"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
])
def test_bad_listener_settings_stop_the_start_naming_them(settings, message):
    with pytest.raises(ConfigError, match=message):
        config(**settings)


def test_listen_must_be_one_of_the_listeners():
    with pytest.raises(ConfigError, match="is not one of listeners"):
        config("127.0.0.1:9000", listeners="PLAINTEXT://127.0.0.1:9092")


def test_secrets_are_hidden_in_the_banner_and_jaas_lines_pass_intact():
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="a=b;c" user_bob="x";')
    cfg = config(**{"listeners": "SASL_PLAINTEXT://127.0.0.1:9092",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
                    "ssl.key.password": "hunter2"})
    assert cfg.for_listener("SASL_PLAINTEXT", "plain.sasl.jaas.config") == jaas
    shown = {name: value for name, value, _ in cfg.describe()}
    assert shown["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == HIDDEN
    assert shown["ssl.key.password"] == HIDDEN
    assert shown["ssl.keystore.key"] == ""  # unset: nothing to hide
    assert "hunter2" not in repr(cfg.describe())


def test_principal_mapping_rules_are_kafkas():
    rules = principal_rules("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, RULE:^CN=([^,]*).*$/$1/, "
                            "DEFAULT")
    assert map_principal("CN=Alice,OU=Eng,O=Example", rules) == "alice@eng"
    assert map_principal("CN=svc,O=Example", rules) == "svc"
    assert map_principal("O=Example", rules) == "O=Example"
    with pytest.raises(ConfigError):
        principal_rules("RULE:broken")


def test_a_mutual_tls_client_is_its_certificates_mapped_name(tmp_path: Path):
    ca = TestCA(tmp_path)
    server = ca.issue("broker", "CN=localhost", server=True)
    alice = ca.issue("alice", "CN=Alice,OU=eng,O=Odradek tests")
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.certificate.chain": server.cert.read_text(),
        "ssl.keystore.key": server.key.read_text(),
        "ssl.client.auth": "required",
        "ssl.truststore.certificates": ca.cert.read_text(),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L",
    }
    with running_broker(**settings) as node:
        port = node.broker.listener_ports["SSL"]
        ctx = ssl.create_default_context(cafile=str(ca.cert))
        ctx.load_cert_chain(str(alice.cert), str(alice.key))
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost"):
            deadline = time.monotonic() + 10
            sessions = []
            while not sessions and time.monotonic() < deadline:
                sessions = [c.session for c in list(node.broker._connections.values())
                            if c.listener.name == "SSL" and c.session is not None]
                time.sleep(0.02)
            assert [s.principal for s in sessions] == ["User:alice"]
