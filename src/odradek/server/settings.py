"""The broker settings Odradek knows, under Kafka's broker config names: each one's
default, value parser and doc (``SETTINGS``), which of them are dynamic broker configs
(``DYNAMIC_BROKER_SETTINGS``), and the value parsers they use, which raise ConfigError
naming the setting. ``server/config.py`` loads a broker's values of them from its flags,
environment and config file.

The ``log.*`` settings are the broker-wide defaults of the topic-level settings the log
honours (``log.retention.ms`` -> ``retention.ms``), exactly as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.cluster.replica_selector import RACK_AWARE_SELECTOR, check_selector_class
from odradek.server.log_setup import FORMATS as LOG_FORMATS
from odradek.server.log_setup import LEVELS as LOG_LEVELS
from odradek.storage.config import CLEANUP_POLICIES, COMPRESSION_TYPES, TIMESTAMP_TYPES


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and its source."""


def _int(minimum: int | None = None) -> Callable[[str, Any], int]:
    def parse(name: str, raw: Any) -> int:
        if isinstance(raw, bool):
            raise ConfigError(f"{name} must be an integer, got {raw!r}")
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ConfigError(f"{name} must be at least {minimum}, got {value}")
        return value

    return parse


def _bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


def _assignors(name: str, raw: Any) -> str:
    names = [a.strip() for a in str(raw).split(",") if a.strip()]
    unknown = [a for a in names if a not in ("uniform", "range")]
    if not names or unknown:
        raise ConfigError(f"{name} must list assignors among uniform, range; got {raw!r}")
    return ",".join(names)


def _replica_selector(name: str, raw: Any) -> str:
    try:
        return check_selector_class(str(raw))
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _float(name: str, raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


def _str(name: str, raw: Any) -> str:
    return str(raw)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)  # Kafka's default


def parse_endpoints(name: str, raw: Any) -> list[tuple[str, str, int]]:
    """(listener name, host, port) of each ``NAME://HOST:PORT`` in a comma-separated
    list (``listeners``, ``advertised.listeners``); names are upper-cased and unique."""
    out: list[tuple[str, str, int]] = []
    for item in str(raw).split(","):
        item = item.strip()
        if not item:
            continue
        scheme, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if (not sep or not scheme or not colon or not port.isdigit()
                or not 0 <= int(port) < 65536):
            raise ConfigError(f"{name} must be NAME://HOST:PORT[,...], got {raw!r}")
        listener = scheme.strip().upper()
        if any(listener == seen for seen, _, _ in out):
            raise ConfigError(f"{name} names the listener {listener} twice: {raw!r}")
        out.append((listener, host.strip("[]"), int(port)))
    return out


def _endpoints(name: str, raw: Any) -> str:
    return ",".join(f"{n}://{h}:{p}" for n, h, p in parse_endpoints(name, raw))


def parse_protocol_map(name: str, raw: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in str(raw).split(","):
        if not item.strip():
            continue
        listener, sep, protocol = item.partition(":")
        listener, protocol = listener.strip().upper(), protocol.strip().upper()
        if not sep or not listener or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{name} must map listener names to one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}, got {raw!r}")
        out[listener] = protocol
    return out


def _protocol_map(name: str, raw: Any) -> str:
    return ",".join(f"{k}:{v}" for k, v in parse_protocol_map(name, raw).items())


def _upper(name: str, raw: Any) -> str:
    return str(raw).strip().upper()


def _csv(name: str, raw: Any) -> str:
    return ",".join(x.strip() for x in str(raw).split(",") if x.strip())


def _address(name: str, raw: Any) -> str:
    """HOST:PORT, or empty for off."""
    text = str(raw).strip()
    if text:
        _host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"{name} must be HOST:PORT (or empty: off), got {text!r}")
    return text


def _jwks_url(name: str, raw: Any) -> str:
    value = str(raw).strip()
    if value and not value.lower().startswith(("https://", "http://", "file:")):
        raise ConfigError(f"{name} must be an https://, http:// or file: URL, got {raw!r}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(name: str, raw: Any) -> str:
        value = str(raw)
        if value not in options:
            raise ConfigError(f"{name} must be one of {', '.join(options)}, got {raw!r}")
        return value

    return parse


def _cleanup_policy(name: str, raw: Any) -> str:
    """A list in Kafka, in any order: "delete,compact" is "compact,delete"."""
    value = ",".join(sorted({p.strip() for p in str(raw).split(",") if p.strip()}))
    return _choice(CLEANUP_POLICIES)(name, value if value else str(raw))


def _log_level(name: str, raw: Any) -> str:
    """A level name (server.log_setup.LEVELS), upper-cased."""
    value = str(raw).strip().upper()
    if value not in LOG_LEVELS:
        raise ConfigError(f"{name} must be a log level ({', '.join(LOG_LEVELS)}), "
                          f"got {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[str, Any], Any]
    doc: str
    topic_name: str | None = None  # the topic-level setting this is the default of
    sensitive: bool = False  # a secret: never shown (the banner, DescribeConfigs)


_SETTINGS = [
    Setting("node.id", 0, _int(0), "this broker's id"),
    Setting("num.partitions", 1, _int(1), "partitions of an auto-created topic"),
    Setting("default.replication.factor", 1, _int(1), "replicas of an auto-created topic"),
    Setting("auto.create.topics.enable", True, _bool,
            "create a topic when a client asks for its metadata or produces to it"),
    Setting("delete.topic.enable", True, _bool, "allow DeleteTopics"),
    Setting("message.max.bytes", 1048588, _int(0), "largest record batch accepted",
            "max.message.bytes"),
    Setting("socket.request.max.bytes", 104857600, _int(1024),
            "largest request frame; checked before anything is allocated"),
    Setting("connections.max.idle.ms", 600000, _int(1), "close connections idle this long"),
    Setting("metrics.listen", "", _address,
            "HOST:PORT serving Prometheus /metrics, /healthz and /readyz (empty: off)"),
    Setting("log.format", "text", _choice(LOG_FORMATS),
            "log lines as text, or one JSON object each (json)"),
    Setting("log.level", "INFO", _log_level,
            "level of the broker's own loggers (odradek.*); log.level.<logger> sets one"),
    Setting("queued.max.requests", 500, _int(1), "requests read ahead per connection"),
    Setting("max.request.partition.size.limit", 2000, _int(1),
            "most partitions a DescribeTopicPartitions answer holds (the client's limit "
            "is kept if lower)"),
    Setting("log.dirs", "", _str,
            "DIR[,DIR...]: the log directories (JBOD), every partition log in one of "
            "them; default: the data directory"),
    Setting("log.segment.bytes", 1073741824, _int(14), "segment size", "segment.bytes"),
    Setting("log.roll.ms", 604800000, _int(1), "segment age", "segment.ms"),
    Setting("log.index.interval.bytes", 4096, _int(0), "index density",
            "index.interval.bytes"),
    Setting("log.index.size.max.bytes", 10485760, _int(8), "offset index size",
            "segment.index.bytes"),
    Setting("log.flush.interval.messages", 2**63 - 1, _int(1), "fsync after N records",
            "flush.messages"),
    Setting("log.flush.interval.ms", 2**63 - 1, _int(0), "fsync after T ms", "flush.ms"),
    Setting("log.retention.ms", 604800000, _int(-1), "time retention", "retention.ms"),
    Setting("log.retention.bytes", -1, _int(-1), "size retention", "retention.bytes"),
    Setting("log.cleanup.policy", "delete", _cleanup_policy, "cleanup policy",
            "cleanup.policy"),
    Setting("log.cleaner.delete.retention.ms", 86400000, _int(0), "tombstone retention",
            "delete.retention.ms"),
    Setting("log.cleaner.min.cleanable.ratio", 0.5, _float, "dirty ratio to compact",
            "min.cleanable.dirty.ratio"),
    Setting("log.cleaner.min.compaction.lag.ms", 0, _int(0), "compaction lag",
            "min.compaction.lag.ms"),
    Setting("log.message.timestamp.type", "CreateTime", _choice(TIMESTAMP_TYPES),
            "CreateTime or LogAppendTime", "message.timestamp.type"),
    Setting("compression.type", "producer", _choice(COMPRESSION_TYPES),
            "codec of stored batches", "compression.type"),
    Setting("log.segment.delete.delay.ms", 60000, _int(0), "delay before unlinking",
            "file.delete.delay.ms"),
    Setting("log.retention.check.interval.ms", 300000, _int(1), "retention check period"),
    Setting("log.flush.scheduler.interval.ms", 1000, _int(1), "flush.ms check period"),
    Setting("log.flush.offset.checkpoint.interval.ms", 60000, _int(1), "checkpoint period"),
    Setting("log.cleaner.backoff.ms", 15000, _int(1), "compaction check period"),
    Setting("log.cleaner.enable", True, _bool, "run the log cleaner"),
    # Tiered storage (KIP-405; docs/tiered-storage.md). The store itself is configured
    # by rsm.config.* (storage/remote/store.py).
    Setting("remote.log.storage.system.enable", False, _bool,
            "allow topics with remote.storage.enable=true (tiered storage)"),
    Setting("remote.log.manager.task.interval.ms", 30000, _int(1),
            "how often tiered logs' rolled segments are copied and expired"),
    Setting("remote.log.reader.threads", 10, _int(1), "threads reading the remote tier"),
    Setting("remote.log.index.file.cache.total.size.bytes", 1073741824, _int(1),
            "bytes of remote segment chunks and indexes cached for reads"),
    Setting("log.local.retention.ms", -2, _int(-2), "local tier's time retention",
            "local.retention.ms"),
    Setting("log.local.retention.bytes", -2, _int(-2), "local tier's size retention",
            "local.retention.bytes"),
    # Consumer groups (the coordinator and its internal topic __consumer_offsets).
    Setting("offsets.topic.num.partitions", 50, _int(1),
            "partitions of __consumer_offsets (fixed once the topic exists)"),
    Setting("offsets.topic.segment.bytes", 104857600, _int(14),
            "segment size of __consumer_offsets (small, so compaction can start early)"),
    Setting("offsets.retention.minutes", 10080, _int(1),
            "committed offsets of an empty group are dropped after this long"),
    Setting("offsets.retention.check.interval.ms", 600000, _int(1),
            "how often expired offsets are looked for"),
    Setting("group.initial.rebalance.delay.ms", 3000, _int(0),
            "the first rebalance of an empty group waits this long for more members"),
    Setting("group.min.session.timeout.ms", 6000, _int(0), "shortest session a member may ask for"),
    Setting("group.max.session.timeout.ms", 1800000, _int(0),
            "longest session a member may ask for"),
    Setting("group.max.size", 2147483647, _int(1), "members per group"),
    Setting("group.consumer.session.timeout.ms", 45000, _int(1),
            "KIP-848 consumer groups: a member silent this long is removed"),
    Setting("group.consumer.heartbeat.interval.ms", 5000, _int(1),
            "KIP-848 consumer groups: how often members are told to heartbeat"),
    Setting("group.consumer.min.session.timeout.ms", 45000, _int(1),
            "KIP-848 consumer groups: the least consumer.session.timeout.ms a group "
            "config may set"),
    Setting("group.consumer.max.session.timeout.ms", 60000, _int(1),
            "KIP-848 consumer groups: the most consumer.session.timeout.ms a group "
            "config may set"),
    Setting("group.consumer.min.heartbeat.interval.ms", 5000, _int(1),
            "KIP-848 consumer groups: the least consumer.heartbeat.interval.ms a group "
            "config may set"),
    Setting("group.consumer.max.heartbeat.interval.ms", 15000, _int(1),
            "KIP-848 consumer groups: the most consumer.heartbeat.interval.ms a group "
            "config may set"),
    Setting("group.consumer.assignors", "uniform,range", _assignors,
            "KIP-848 server-side assignors (uniform, range); the first is the default"),
    Setting("offset.metadata.max.bytes", 4096, _int(0),
            "longest metadata string of a committed offset"),
    # Streams groups (KIP-1071): Kafka's group.streams.* settings (coordinator/
    # streams_group.py), each group config's default and its bounds.
    Setting("group.streams.session.timeout.ms", 45000, _int(1),
            "streams groups: a member silent this long is removed"),
    Setting("group.streams.min.session.timeout.ms", 45000, _int(1),
            "streams groups: the least streams.session.timeout.ms a group config may set"),
    Setting("group.streams.max.session.timeout.ms", 60000, _int(1),
            "streams groups: the most streams.session.timeout.ms a group config may set"),
    Setting("group.streams.heartbeat.interval.ms", 5000, _int(1),
            "streams groups: how often members are told to heartbeat"),
    Setting("group.streams.min.heartbeat.interval.ms", 5000, _int(1),
            "streams groups: the least streams.heartbeat.interval.ms a group config may set"),
    Setting("group.streams.max.heartbeat.interval.ms", 15000, _int(1),
            "streams groups: the most streams.heartbeat.interval.ms a group config may set"),
    Setting("group.streams.num.standby.replicas", 0, _int(0),
            "streams groups: standby copies of each task on other instances"),
    Setting("group.streams.max.standby.replicas", 2, _int(0),
            "streams groups: the most streams.num.standby.replicas a group config may set"),
    Setting("group.streams.max.size", 2147483647, _int(1),
            "streams groups: members per group"),
    Setting("group.streams.topology.description.plugin.class", "",
            _choice(("", "org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin")),
            "streams groups (KIP-1331): where the members' topology descriptions are "
            "kept; empty (Kafka's default) turns the feature off, Kafka's "
            "InMemoryTopologyDescriptionPlugin keeps them in the coordinator's memory"),
    # Share groups (KIP-932): Kafka's group.share.* settings, each group config's default
    # and the bounds a group config may set (coordinator/share_group.py,
    # server/share/).
    Setting("group.share.session.timeout.ms", 45000, _int(1),
            "share groups: a member silent this long is removed"),
    Setting("group.share.min.session.timeout.ms", 45000, _int(1),
            "share groups: the least share.session.timeout.ms a group config may set"),
    Setting("group.share.max.session.timeout.ms", 60000, _int(1),
            "share groups: the most share.session.timeout.ms a group config may set"),
    Setting("group.share.heartbeat.interval.ms", 5000, _int(1),
            "share groups: how often members are told to heartbeat"),
    Setting("group.share.min.heartbeat.interval.ms", 5000, _int(1),
            "share groups: the least share.heartbeat.interval.ms a group config may set"),
    Setting("group.share.max.heartbeat.interval.ms", 15000, _int(1),
            "share groups: the most share.heartbeat.interval.ms a group config may set"),
    Setting("group.share.record.lock.duration.ms", 30000, _int(1000),
            "share groups: how long a consumer holds the records it acquired"),
    Setting("group.share.min.record.lock.duration.ms", 15000, _int(1000),
            "share groups: the least share.record.lock.duration.ms a group config may set"),
    Setting("group.share.max.record.lock.duration.ms", 60000, _int(1000),
            "share groups: the most share.record.lock.duration.ms a group config may set"),
    Setting("group.share.delivery.count.limit", 5, _int(2),
            "share groups: deliveries of a record before it is archived"),
    Setting("group.share.min.delivery.count.limit", 2, _int(2),
            "share groups: the least share.delivery.count.limit a group config may set"),
    Setting("group.share.max.delivery.count.limit", 10, _int(2),
            "share groups: the most share.delivery.count.limit a group config may set"),
    Setting("group.share.partition.max.record.locks", 2000, _int(100),
            "share groups: records in flight (acquired, not yet done) per share partition"),
    Setting("group.share.min.partition.max.record.locks", 100, _int(100),
            "share groups: the least share.partition.max.record.locks a group config may set"),
    Setting("group.share.max.partition.max.record.locks", 4000, _int(100),
            "share groups: the most share.partition.max.record.locks a group config may set"),
    Setting("group.share.max.size", 200, _int(1), "share groups: members per group"),
    Setting("group.share.max.share.sessions", 2000, _int(1),
            "share groups: share sessions (ShareFetch sessions) this broker keeps"),
    Setting("share.coordinator.state.topic.num.partitions", 50, _int(1),
            "partitions of __share_group_state (fixed once the topic exists)"),
    Setting("share.coordinator.state.topic.segment.bytes", 104857600, _int(14),
            "segment size of __share_group_state"),
    Setting("share.coordinator.state.topic.replication.factor", 3, _int(1),
            "replicas of __share_group_state (in a cluster)"),
    Setting("share.coordinator.state.topic.min.isr", 2, _int(1),
            "min.insync.replicas of __share_group_state (in a cluster)"),
    # Transactions (the coordinator and its internal topic __transaction_state).
    Setting("transaction.state.log.num.partitions", 50, _int(1),
            "partitions of __transaction_state (fixed once the topic exists)"),
    Setting("transaction.state.log.segment.bytes", 104857600, _int(14),
            "segment size of __transaction_state"),
    Setting("transaction.max.timeout.ms", 900000, _int(1),
            "longest transaction.timeout.ms a producer may ask for"),
    Setting("transactional.id.expiration.ms", 604800000, _int(1),
            "a transactional id idle this long is forgotten"),
    Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000, _int(1),
            "how often transactions older than their timeout are looked for (and aborted)"),
    Setting("transaction.remove.expired.transaction.cleanup.interval.ms", 3600000, _int(1),
            "how often expired transactional ids are looked for"),
    Setting("transaction.partition.verification.enable", True, _bool,
            "refuse a transactional produce to a partition not added to its transaction"),
    Setting("transaction.state.log.replication.factor", 3, _int(1),
            "replicas of __transaction_state (in a cluster)"),
    Setting("transaction.state.log.min.isr", 2, _int(1),
            "min.insync.replicas of __transaction_state (in a cluster)"),
    Setting("offsets.topic.replication.factor", 3, _int(1),
            "replicas of __consumer_offsets (in a cluster)"),
    # The cluster (docs/cluster.md). Without zookeeper.connect the broker is a single
    # node and none of these but the topic-level defaults apply.
    Setting("zookeeper.connect", "", _str,
            "ZooKeeper ensemble of the cluster, host:port[,host:port...][/chroot]; "
            "empty: a single node"),
    Setting("zookeeper.session.timeout.ms", 18000, _int(1),
            "a broker silent this long to ZooKeeper is taken for dead"),
    Setting("zookeeper.connection.timeout.ms", 18000, _int(1),
            "how long one attempt to reach ZooKeeper may take"),
    Setting("broker.rack", "", _str, "this broker's rack, for rack-aware replica placement"),
    Setting("replica.selector.class", "", _replica_selector,
            "which replica a consumer fetches from (KIP-392): empty, the leader only; "
            f"{RACK_AWARE_SELECTOR}, a replica in the consumer's client.rack "
            "(the leader if it is there, else that rack's most caught-up in-sync replica)"),
    # Listeners and security (docs/security.md). Without ``listeners`` the broker has one
    # PLAINTEXT listener on --listen.
    Setting("listeners", "", _endpoints,
            "NAME://HOST:PORT[,...]: the listeners, each with the security protocol "
            "listener.security.protocol.map gives its name; default: PLAINTEXT on --listen"),
    Setting("advertised.listeners", "", _endpoints,
            "NAME://HOST:PORT[,...] clients and brokers are told, per listener; "
            "default: each listener's own address"),
    Setting("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP, _protocol_map,
            "listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    Setting("inter.broker.listener.name", "", _upper,
            "the listener brokers use to reach each other; default: PLAINTEXT if there "
            "is one, else the first listener"),
    Setting("ssl.keystore.type", "PEM", _choice(("PEM",)),
            "the broker's key and certificate format (PEM only)"),
    Setting("ssl.keystore.location", "", _str,
            "a PEM file with the broker's private key and certificate chain"),
    Setting("ssl.keystore.certificate.chain", "", _str,
            "the broker's certificate chain as PEM text (instead of a file)"),
    Setting("ssl.keystore.key", "", _str,
            "the broker's private key as PEM text (instead of a file)", sensitive=True),
    Setting("ssl.key.password", "", _str, "the password of an encrypted private key",
            sensitive=True),
    Setting("ssl.truststore.type", "PEM", _choice(("PEM",)),
            "format of the trusted CA certificates (PEM only)"),
    Setting("ssl.truststore.location", "", _str,
            "a PEM file of the CA certificates client certificates must chain to"),
    Setting("ssl.truststore.certificates", "", _str,
            "trusted CA certificates as PEM text (instead of a file)"),
    Setting("ssl.client.auth", "none", _choice(("none", "requested", "required")),
            "whether TLS clients must (required) or may (requested) present a certificate"),
    Setting("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", _csv,
            "TLS versions accepted (TLSv1.2, TLSv1.3)"),
    Setting("ssl.cipher.suites", "", _csv,
            "OpenSSL cipher names for TLS 1.2 (empty: OpenSSL's defaults)"),
    Setting("ssl.principal.mapping.rules", "DEFAULT", _str,
            "rules mapping a client certificate's distinguished name to its user name"),
    Setting("ssl.endpoint.identification.algorithm", "https", _str,
            "host name checking of the broker's certificate by other brokers ('' off)"),
    Setting("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", _csv,
            "SASL mechanisms offered on SASL listeners"),
    # OAUTHBEARER (KIP-768): tokens are JWTs validated against the identity provider's JWKS.
    Setting("sasl.oauthbearer.jwks.endpoint.url", "", _jwks_url,
            "where the identity provider's public keys (a JWKS) are read: an https:// or "
            "http:// URL or a file: path; OAUTHBEARER refuses every token without it"),
    Setting("sasl.oauthbearer.jwks.endpoint.refresh.ms", 3600000, _int(1),
            "how often the JWKS is read again (also early for a token with an unknown kid)"),
    Setting("sasl.oauthbearer.expected.audience", "", _csv,
            "audiences a token's aud must name one of (empty: tokens must have no aud)"),
    Setting("sasl.oauthbearer.expected.issuer", "", _str,
            "the iss a token must have (empty: not checked)"),
    Setting("sasl.oauthbearer.sub.claim.name", "sub", _str,
            "the claim naming the token's principal (User:<claim>)"),
    Setting("sasl.oauthbearer.scope.claim.name", "scope", _str,
            "the claim holding the token's scopes"),
    Setting("sasl.oauthbearer.clock.skew.seconds", 30, _int(0),
            "leeway for exp, nbf and iat against the identity provider's clock"),
    Setting("sasl.mechanism.inter.broker.protocol", "PLAIN", _str,
            "the SASL mechanism brokers use with each other"),
    Setting("connections.max.reauth.ms", 0, _int(0),
            "SASL sessions expire after this long unless re-authenticated (0: never)"),
    # Delegation tokens (KIP-48): on only with a secret key, the same on every broker.
    Setting("delegation.token.secret.key", "", _str,
            "the key token HMACs are made with; empty: delegation tokens are off",
            sensitive=True),
    Setting("delegation.token.max.lifetime.ms", 604800000, _int(1),
            "the longest a delegation token lives, however often it is renewed"),
    Setting("delegation.token.expiry.time.ms", 86400000, _int(1),
            "a delegation token expires this long after its creation or last renewal"),
    Setting("delegation.token.expiry.check.interval.ms", 3600000, _int(1),
            "how often expired delegation tokens are removed"),
    Setting("authorizer.class.name", "", _str,
            "any value turns the ACL authorizer on (Kafka's StandardAuthorizer rules)"),
    Setting("super.users", "", _str,
            "principals allowed everything, separated by ';' (User:admin;User:broker)"),
    Setting("allow.everyone.if.no.acl.found", False, _bool,
            "with the authorizer on, allow access to resources that have no ACL"),
    Setting("quota.window.size.seconds", 1, _int(1),
            "client quotas: the seconds of quota a client may spend at once"),
    Setting("min.insync.replicas", 1, _int(1),
            "in-sync replicas an acks=all write needs", "min.insync.replicas"),
    Setting("unclean.leader.election.enable", False, _bool,
            "elect a replica outside the ISR when no ISR member is alive (may lose "
            "committed records)", "unclean.leader.election.enable"),
    Setting("replica.lag.time.max.ms", 30000, _int(1),
            "a follower not caught up for this long leaves the ISR"),
    Setting("replica.fetch.max.bytes", 1048576, _int(1),
            "bytes a follower asks per partition and fetch"),
    Setting("replica.fetch.response.max.bytes", 10485760, _int(1),
            "bytes a follower asks per fetch"),
    Setting("replica.fetch.wait.max.ms", 500, _int(0), "a follower's long-poll wait"),
    Setting("replica.fetch.min.bytes", 1, _int(1), "bytes a follower's fetch waits for"),
    Setting("replica.fetch.backoff.ms", 1000, _int(0),
            "pause before a follower retries a partition after an error"),
    Setting("replica.socket.timeout.ms", 30000, _int(1),
            "a request to another broker not answered in this time (beyond its wait) fails"),
    Setting("num.replica.fetchers", 1, _int(1),
            "fetcher connections per leader broker a follower spreads its partitions over"),
    # Dynamic in Kafka, and here: AlterConfigs on a broker (or the cluster default)
    # changes them at run time (docs/cluster.md, "Moving partitions").
    Setting("leader.replication.throttled.rate", 2**63 - 1, _int(1),
            "bytes/s a leader sends to throttled replicas that are not in sync "
            "(leader.replication.throttled.replicas); a dynamic broker config"),
    Setting("follower.replication.throttled.rate", 2**63 - 1, _int(1),
            "bytes/s a follower fetches for its throttled replicas that are not in sync "
            "(follower.replication.throttled.replicas); a dynamic broker config"),
    Setting("replica.alter.log.dirs.io.max.bytes.per.second", 2**63 - 1, _int(1),
            "bytes/s a move of logs between this broker's log directories copies "
            "(AlterReplicaLogDirs); a dynamic broker config"),
    Setting("auto.leader.rebalance.enable", True, _bool,
            "the controller moves leadership back to preferred replicas"),
    Setting("leader.imbalance.per.broker.percentage", 10, _int(0),
            "share of a broker's preferred partitions led elsewhere that triggers it"),
    Setting("leader.imbalance.check.interval.seconds", 300, _int(1),
            "how often the controller checks leader balance"),
    Setting("controlled.shutdown.enable", True, _bool,
            "a stopping broker has its leadership moved first"),
    Setting("controlled.shutdown.max.retries", 3, _int(1),
            "with controlled.shutdown.retry.backoff.ms, how long a stop waits for that"),
    Setting("controlled.shutdown.retry.backoff.ms", 5000, _int(0),
            "see controlled.shutdown.max.retries"),
]
SETTINGS: dict[str, Setting] = {s.name: s for s in _SETTINGS}
# Settings the broker takes at run time from AlterConfigs on a broker resource (or the
# cluster-wide default), Kafka's dynamic broker configs (server.dynamic_configs): the
# replication and log-directory throttle rates and the broker-wide defaults of topic
# configs (Kafka's DynamicLogConfig); every other setting comes from the command line,
# environment or file only.
DYNAMIC_BROKER_SETTINGS = frozenset({"leader.replication.throttled.rate",
                                     "follower.replication.throttled.rate",
                                     "replica.alter.log.dirs.io.max.bytes.per.second"}
                                    | {s.name for s in _SETTINGS if s.topic_name})
