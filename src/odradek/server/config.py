"""Broker configuration under Kafka's broker config names.

Sources, highest precedence first: command-line flags, environment variables
(``ODRADEK_`` + the name upper-cased with dots as underscores, e.g.
``ODRADEK_LOG_RETENTION_MS``), a TOML file (``--config``; keys are the Kafka names,
quoted, at top level), then the defaults (``server/settings.py``, which has every
setting's name, default, parser and doc). An unknown name or a value of the wrong type is
a startup error naming the setting and where it came from.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.server.settings import (
    _SETTINGS,
    SETTINGS,
    ConfigError,  # also load_config's error: re-exported, for its callers
    _log_level,
    parse_endpoints,
    parse_protocol_map,
)
from odradek.storage.config import LogConfig

ENV_PREFIX = "ODRADEK_"


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: Kafka's ``NAME://HOST:PORT`` and its security protocol (from
    ``listener.security.protocol.map``). An empty host listens on every address."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


# Kafka also accepts coarser units for some settings; they map onto the ms ones.
_ALIASES = {
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
    "broker.id": ("node.id", 1),
}


# Per-logger levels: ``log.level.<logger name>=LEVEL`` (server.log_setup).
LOGGER_LEVEL_PREFIX = "log.level."
# The remote storage manager's own settings (Kafka's remote.log.storage.manager.impl.
# prefix), passed to storage/remote/store.py without the prefix.
RSM_PREFIX = "rsm.config."


# Per-listener settings (Kafka's ``listener.name.<listener>.<setting>``): a listener's
# own value of these settings, or its JAAS line for a SASL mechanism.
LISTENER_PREFIX = "listener.name."
_PER_LISTENER = frozenset(n for n in SETTINGS if n.startswith((
    "ssl.", "sasl.enabled", "sasl.oauthbearer."))) | {
    "connections.max.reauth.ms"}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def _listener_setting(name: str) -> tuple[str, str]:
    """(listener, setting) of ``listener.name.<listener>.<setting>``, the setting either
    one of _PER_LISTENER or ``<mechanism>.sasl.jaas.config``; else ConfigError."""
    rest = name[len(LISTENER_PREFIX):]
    listener, _, setting = rest.partition(".")
    mechanism, _, tail = setting.partition(".")
    if listener and (setting in _PER_LISTENER or (
            tail == "sasl.jaas.config" and mechanism.upper() in SASL_MECHANISMS)):
        return listener.upper(), setting
    raise ConfigError(f"unknown setting {name!r}: listener.name.<listener>. takes "
                      f"{', '.join(sorted(_PER_LISTENER))} or <mechanism>.sasl.jaas.config")


def is_sensitive(name: str) -> bool:
    """Whether a setting's value is a secret (Kafka's PASSWORD type)."""
    if name.startswith(LISTENER_PREFIX):
        name = _listener_setting(name)[1]
    setting = SETTINGS.get(name)
    if name.startswith(RSM_PREFIX):
        return "secret" in name or "password" in name
    return name.endswith("sasl.jaas.config") or (setting is not None and setting.sensitive)


HIDDEN = "[hidden]"  # how a secret is shown, as Kafka's logs show PASSWORD values


@dataclass(frozen=True)
class BrokerConfig:
    """The effective broker settings (Kafka names -> values) plus where each came from.

    ``host``/``port``: the main listener's (``--listen``'s, else the first of
    ``listeners``); ``listener_values``: the ``listener.name.*`` settings, as given."""

    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: str = "./odradek-data"
    values: dict[str, Any] = field(default_factory=lambda: {s.name: s.default for s in _SETTINGS})
    sources: dict[str, str] = field(default_factory=dict)
    listener_values: dict[str, str] = field(default_factory=dict)
    logger_levels: dict[str, str] = field(default_factory=dict)  # logger name -> level
    rsm_config: dict[str, str] = field(default_factory=dict)  # rsm.config.* unprefixed

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @functools.cached_property
    def listeners(self) -> list[Listener]:
        """Every listener, the main one first (parsed once: Metadata asks per request)."""
        given = parse_endpoints("listeners", self.values["listeners"])
        if not given:
            return [Listener("PLAINTEXT", "PLAINTEXT", self.host, self.port)]
        protocols = parse_protocol_map("listener.security.protocol.map",
                                       self.values["listener.security.protocol.map"])
        out = [Listener(n, protocols[n], h, p) for n, h, p in given]
        main = next(i for i, lst in enumerate(out) if (lst.host, lst.port) == (self.host,
                                                                               self.port))
        return [out[main], *out[:main], *out[main + 1:]]

    @property
    def inter_broker_listener(self) -> str:
        name = self.values["inter.broker.listener.name"]
        if name:
            return name
        names = [lst.name for lst in self.listeners]
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]

    @functools.cached_property
    def advertised_by_listener(self) -> dict[str, tuple[str, int]]:
        """listener name -> the (host, port) ``advertised.listeners`` gives it."""
        return {n: (h, p) for n, h, p in parse_endpoints("advertised.listeners",
                                                           self.values["advertised.listeners"])}

    def for_listener(self, listener: str, name: str) -> Any:
        """A setting's value on one listener: ``listener.name.<listener>.<name>`` if
        set, else the broker-wide value (None for an unset JAAS line)."""
        own = self.listener_values.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
        if own is not None:
            setting = SETTINGS.get(name)
            return setting.parse(name, own) if setting is not None else own
        return self.values.get(name)

    @property
    def clustered(self) -> bool:
        """Whether this broker is part of a ZooKeeper-coordinated cluster."""
        return bool(self.values["zookeeper.connect"])

    @property
    def log_dirs(self) -> list[str]:
        """The log directories, absolute: ``log.dirs``, else the data directory (which
        keeps the broker's own files either way)."""
        given = [d.strip() for d in self.values["log.dirs"].split(",") if d.strip()]
        return list(dict.fromkeys(os.path.abspath(d) for d in given or [self.data_dir]))

    def log_config(self) -> LogConfig:
        """The topic-level defaults every log starts from."""
        return LogConfig.from_kafka(
            {s.topic_name: self.values[s.name] for s in _SETTINGS if s.topic_name}
        )

    def describe(self) -> list[tuple[str, Any, str]]:
        """(name, value, source) for every setting, for the startup banner; secrets
        (set ones) shown as ``[hidden]``."""
        rows = [(s.name, HIDDEN if s.sensitive and self.values[s.name] else self.values[s.name],
                 self.sources.get(s.name, "default")) for s in _SETTINGS]
        rows += [(name, HIDDEN if is_sensitive(name) else value,
                  self.sources.get(name, "default"))
                 for name, value in sorted(self.listener_values.items())]
        rows += [(f"{LOGGER_LEVEL_PREFIX}{logger}", level,
                  self.sources.get(f"{LOGGER_LEVEL_PREFIX}{logger}", "default"))
                 for logger, level in sorted(self.logger_levels.items())]
        rows += [(f"{RSM_PREFIX}{name}", HIDDEN if is_sensitive(RSM_PREFIX + name) else value,
                  self.sources.get(f"{RSM_PREFIX}{name}", "default"))
                 for name, value in sorted(self.rsm_config.items())]
        return rows


def _apply(values: dict[str, Any], sources: dict[str, str], name: str, raw: Any,
           source: str) -> None:
    if name.startswith(LISTENER_PREFIX):
        try:
            setting_name = _listener_setting(name)[1]
            if setting_name in SETTINGS:
                SETTINGS[setting_name].parse(name, raw)  # refuse a bad value now
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from {source})") from None
        values.setdefault(LISTENER_PREFIX, {})[name] = str(raw)
        sources[name] = source
        return
    if name.startswith(RSM_PREFIX):
        if name == RSM_PREFIX:
            raise ConfigError(f"{name!r} names no setting (from {source})")
        values.setdefault(RSM_PREFIX, {})[name[len(RSM_PREFIX):]] = str(raw)
        sources[name] = source
        return
    if name.startswith(LOGGER_LEVEL_PREFIX):
        logger = name[len(LOGGER_LEVEL_PREFIX):]
        if not logger:
            raise ConfigError(f"{name!r} names no logger: log.level.<logger>=LEVEL "
                              f"(from {source})")
        try:
            level = _log_level(name, raw)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from {source})") from None
        values.setdefault(LOGGER_LEVEL_PREFIX, {})[logger] = level
        sources[name] = source
        return
    scale = 1
    if name in _ALIASES:
        name, scale = _ALIASES[name]
    setting = SETTINGS.get(name)
    if setting is None:
        raise ConfigError(f"unknown setting {name!r} (from {source})")
    try:
        value = setting.parse(name, raw)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (from {source})") from None
    values[name] = value * scale if scale != 1 else value
    sources[name] = source


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--listen must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def load_config(
    *,
    listen: str | None = None,
    data_dir: str | None = None,
    config_file: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Merge defaults < file < environment < flags into one BrokerConfig."""
    environ = os.environ if environ is None else environ
    values = {s.name: s.default for s in _SETTINGS}
    sources: dict[str, str] = {}
    host, port, directory = "127.0.0.1", 9092, "./odradek-data"
    listen_given = bool(listen)  # --listen, or listen in the file or the environment
    if config_file:
        try:
            with open(config_file, "rb") as f:
                table = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc}") from None
        for name, raw in table.items():
            if name == "listen":
                host, port = parse_listen(str(raw))
                listen_given = True
            elif name == "data.dir":
                directory = str(raw)
            else:
                _apply(values, sources, name, raw, f"file {config_file}")
    known_env = {ENV_PREFIX + n.upper().replace(".", "_"): n
                 for n in [*SETTINGS, *_ALIASES]}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        if key == ENV_PREFIX + "LISTEN":
            host, port = parse_listen(raw)
            listen_given = True
        elif key == ENV_PREFIX + "DATA_DIR":
            directory = raw
        elif key in known_env:
            _apply(values, sources, known_env[key], raw, f"environment {key}")
        elif key.startswith(ENV_PREFIX + "RSM_CONFIG_"):
            rest = key[len(ENV_PREFIX + "RSM_CONFIG_"):].lower().replace("_", ".")
            _apply(values, sources, RSM_PREFIX + rest, raw, f"environment {key}")
        else:
            raise ConfigError(f"unknown setting in environment variable {key}")
    for name, raw in (overrides or {}).items():
        _apply(values, sources, name, raw, "command line")
    if listen:
        host, port = parse_listen(listen)
    if data_dir:
        directory = data_dir
    per_listener = values.pop(LISTENER_PREFIX, {})
    logger_levels = values.pop(LOGGER_LEVEL_PREFIX, {})
    rsm_config = values.pop(RSM_PREFIX, {})
    host, port = _main_listener(values, host, port, listen_given, per_listener)
    return BrokerConfig(host, port, directory, values, sources, per_listener, logger_levels,
                        rsm_config)


def _main_listener(values: dict[str, Any], host: str, port: int, listen_given: bool,
                   per_listener: Mapping[str, str]) -> tuple[str, int]:
    """Check ``listeners`` and the settings that name listeners; the main listener's
    address: --listen's (which must then be one of ``listeners``), else the first."""
    given = parse_endpoints("listeners", values["listeners"])
    if not given:
        names = {"PLAINTEXT"}
    else:
        protocols = parse_protocol_map("listener.security.protocol.map",
                                       values["listener.security.protocol.map"])
        missing = [n for n, _, _ in given if n not in protocols]
        if missing:
            raise ConfigError(f"listener.security.protocol.map has no security protocol for "
                              f"the listener(s) {', '.join(missing)} of listeners")
        ports = [p for _, _, p in given if p]
        if len(ports) != len(set(ports)):
            raise ConfigError(f"listeners uses a port twice: {values['listeners']}")
        names = {n for n, _, _ in given}
        if listen_given:
            if not any((h or "0.0.0.0", p) == (host, port) or (h, p) == (host, port)
                       for _, h, p in given):
                raise ConfigError(f"--listen {host}:{port} is not one of listeners "
                                  f"({values['listeners']}): give one or make them agree")
            host = next(h for _, h, p in given if p == port and h in (host, "", "0.0.0.0"))
        else:
            _, host, port = given[0]
    for n, _, _ in parse_endpoints("advertised.listeners", values["advertised.listeners"]):
        if n not in names:
            raise ConfigError(f"advertised.listeners names {n}, which is not a listener")
    inter = values["inter.broker.listener.name"]
    if inter and inter not in names:
        raise ConfigError(f"inter.broker.listener.name {inter} is not a listener")
    for name in per_listener:
        listener = _listener_setting(name)[0]
        if listener not in names:
            raise ConfigError(f"{name} is for the listener {listener}, which is not one of "
                              "listeners")
    return host, port
