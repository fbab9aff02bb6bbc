"""Security benchmark (issue 18, "Measured"): produce and consume over TLS and SASL_SSL
against plaintext, same load, in one run; Odradek's TLS against Apache Kafka's; and the
cost of a SCRAM-SHA-512 login.

What it measures:

1. Throughput and broker CPU per record, through confluent-kafka, with broker_bench.py's
   load: N records of 100-byte values to a 1-partition topic (``LOAD_PRODUCER``: acks=1,
   linger.ms=5, batch.num.messages=100,000, no compression, no idempotence), timed from
   the first ``produce()`` to the return of ``flush()``; then the N records back from
   offset 0 with a ``Consumer`` assigned to partition 0 (no group membership), after an
   untimed consumer with the same settings read one record (broker_bench's warm-up
   consumer). Each listener gets a topic of its own, and before the timed parts
   ``--warm-up-records`` records are produced and consumed untimed through it (a topic of
   their own): Apache Kafka's JVM compiles its TLS path meanwhile.
   Broker CPU is utime + stime of the broker process over the timed part (``/proc``).
   - **Odradek**: one ``odradek serve`` per round with four listeners on free ports of
     127.0.0.1: PLAINTEXT, SSL (one-way TLS), SASL_SSL and SASL_PLAINTEXT
     (``ssl.keystore.location``: a PEM file with the key and the chain, from
     ``devcluster/certs.py``'s ``TestCA``; EC P-256 keys). The loads run through PLAINTEXT,
     SSL and SASL_SSL with SCRAM-SHA-512 (the user created with
     ``AdminClient.alter_user_scram_credentials``, 4096 iterations, through the PLAINTEXT
     listener); SASL_PLAINTEXT serves the login loop only.
   - **Apache Kafka 4.4.0** (devcluster/apache_kafka.py, one KRaft node, 1 GiB heap) with a
     PLAINTEXT and an SSL listener (``ssl.keystore.type=PEM``, ``ssl.keystore.location`` =
     the same kind of PEM file, KIP-651), added through the launcher's ``settings``
     overrides (``listeners``, ``advertised.listeners``,
     ``listener.security.protocol.map``).
   The clients trust the test CA (``ssl.ca.location``) and check the broker's name
   (librdkafka's default ``ssl.endpoint.identification.algorithm=https``; the server
   certificate names 127.0.0.1).
2. Authentication cost against Odradek: SCRAM-SHA-512 logins one connection at a time
   for ``--login-seconds``: connect, SaslHandshake v1, SaslAuthenticate v2 twice (scramp's
   ``ScramClient``, which also checks the server's signature), close; logins per second
   of the loop and the broker's CPU per login (so ``1 / CPU per login`` is what one core
   of the broker could serve). Over SASL_PLAINTEXT (SCRAM alone) and over SASL_SSL (a
   full TLS handshake per login too, no session resumption). The client derives the
   salted password (PBKDF2, 4096 rounds of SHA-512) at every login, as a fresh client
   would; the broker keeps StoredKey/ServerKey and does no PBKDF2.

Rounds alternate the systems (ABBA: Odradek then Kafka, Kafka then Odradek, ...) and,
within a broker, the listeners' order (PLAINTEXT, SSL, SASL_SSL, then reversed). Ratios
are medians of per-round ratios. Targets (issue 18): Odradek TLS / plaintext broker CPU
per record <= 3x consuming, <= 1.5x producing; Odradek TLS / Apache Kafka TLS broker CPU
per record <= 1.0x.

Run: ``.venv/bin/python bench/security_bench.py [--records 300000] [--rounds 2]``
(``--no-kafka`` without Apache Kafka; it needs java and scripts/fetch_jvm.sh's jars).
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from scramp import ScramClient

import broker_bench
from _common import (
    finish,
    note,
    self_cpu_s,
    shown_path,
)
from broker_bench import (
    LOAD_PRODUCER,
    Measured,
    answers_kafka_protocol,
    broker_machine_info,
    broker_machine_line,
    java_version,
)
from odradek.client.wire import WireClient
from odradek.devcluster import BrokerProcess as DevBroker
from odradek.devcluster import free_port
from odradek.devcluster.apache_kafka import KAFKA_VERSION, ApacheKafka, kafka_jars_present
from odradek.devcluster.certs import TestCA

ODRADEK = "odradek"
KAFKA = "kafka"
SYSTEMS = (ODRADEK, KAFKA)
LABELS = {ODRADEK: "Odradek", KAFKA: f"Apache Kafka {KAFKA_VERSION}"}
PLAINTEXT, SSL_, SASL_SSL, SASL_PLAINTEXT = "PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"
LOAD_LISTENERS = {ODRADEK: (PLAINTEXT, SSL_, SASL_SSL), KAFKA: (PLAINTEXT, SSL_)}
LISTENER_LABELS = {PLAINTEXT: "PLAINTEXT", SSL_: "SSL (one-way TLS)",
                   SASL_SSL: "SASL_SSL, SCRAM-SHA-512"}
WORKLOADS = ("produce", "consume")
SCRAM_USER, SCRAM_PASSWORD, SCRAM_ITERATIONS = "bench", "bench-secret", 4096
MECHANISM = "SCRAM-SHA-512"
START_TIMEOUT_S = 30.0
READY_POLL_S = 0.02
# (what, system, listener, baseline system, baseline listener, workload, bound)
TARGETS = (
    ("Odradek TLS / plaintext, broker CPU per record, consume", ODRADEK, SSL_, ODRADEK,
     PLAINTEXT, "consume", 3.0),
    ("Odradek TLS / plaintext, broker CPU per record, produce", ODRADEK, SSL_, ODRADEK,
     PLAINTEXT, "produce", 1.5),
    ("Odradek TLS / Apache Kafka TLS, broker CPU per record, produce", ODRADEK, SSL_, KAFKA,
     SSL_, "produce", 1.0),
    ("Odradek TLS / Apache Kafka TLS, broker CPU per record, consume", ODRADEK, SSL_, KAFKA,
     SSL_, "consume", 1.0),
)
# Ratios reported beside the targets (no target): (what, a, b) with a, b = (system, listener).
OTHER_RATIOS = (
    ("Odradek SASL_SSL / plaintext", (ODRADEK, SASL_SSL), (ODRADEK, PLAINTEXT)),
    ("Odradek SASL_SSL / SSL", (ODRADEK, SASL_SSL), (ODRADEK, SSL_)),
    ("Apache Kafka TLS / plaintext", (KAFKA, SSL_), (KAFKA, PLAINTEXT)),
    ("Odradek plaintext / Apache Kafka plaintext", (ODRADEK, PLAINTEXT), (KAFKA, PLAINTEXT)),
)


# --- brokers --------------------------------------------------------------------------


class SecureBroker(broker_bench.Broker):
    """One broker (``kind``) with its listeners on free ports of 127.0.0.1; ready when
    constructed (every listener accepts, PLAINTEXT answers ApiVersions + Metadata).
    ``ports``: listener name -> port; ``bootstrap`` is the PLAINTEXT listener's. Stopping,
    CPU, RSS and output are broker_bench.Broker's."""

    def __init__(self, kind: str, tmp_root: str, keystore: Path) -> None:
        self.kind = kind
        self.data_dir = tempfile.mkdtemp(prefix=f"{kind}-", dir=tmp_root)
        self.kafka: ApacheKafka | None = None
        began = time.monotonic()
        if kind == KAFKA:
            self._start_kafka(keystore)
        else:
            self._start_odradek(keystore)
        self._wait_listeners()
        self.startup_s = time.monotonic() - began
        self.bootstrap = self.address(PLAINTEXT)

    def _start_odradek(self, keystore: Path) -> None:
        self.ports: dict[str, int] = {}
        for name in (PLAINTEXT, SSL_, SASL_SSL, SASL_PLAINTEXT):
            port = free_port()
            while port in self.ports.values():
                port = free_port()
            self.ports[name] = port
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        settings = {"listeners": listeners, "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(keystore),
                    "sasl.enabled.mechanisms": MECHANISM}
        self.log_path = self.data_dir + ".out"
        odradek = DevBroker(None, Path(self.data_dir) / "data", Path(self.log_path),
                            port=self.ports[PLAINTEXT], settings=settings)
        self.cmd = odradek.command()
        odradek.start()
        assert odradek.process is not None
        self.proc = odradek.process
        self.pid = self.proc.pid

    def _start_kafka(self, keystore: Path) -> None:
        kafka = ApacheKafka(self.data_dir)
        kafka.ready_poll_s = READY_POLL_S
        ssl_port = free_port()
        while ssl_port in (kafka.port, kafka.controller_port):
            ssl_port = free_port()
        self.ports = {PLAINTEXT: kafka.port, SSL_: ssl_port}
        # The launcher builds listeners itself; its settings overrides replace them.
        kafka.extra_settings.update({
            "listeners": (f"PLAINTEXT://127.0.0.1:{kafka.port},SSL://127.0.0.1:{ssl_port},"
                          f"CONTROLLER://127.0.0.1:{kafka.controller_port}"),
            "advertised.listeners": (f"PLAINTEXT://127.0.0.1:{kafka.port},"
                                     f"SSL://127.0.0.1:{ssl_port}"),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
        })
        try:
            kafka.start()  # formats the storage, spawns, waits for PLAINTEXT
        except BaseException:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise
        assert kafka.process is not None
        self.kafka = kafka
        self.proc = kafka.process
        self.pid = self.proc.pid
        self.cmd = [str(a) for a in self.proc.args]  # type: ignore[union-attr]
        self.log_path = str(kafka.log_file)

    def _wait_listeners(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = dict(self.ports)
        while waiting:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode} at start:"
                                   f"\n{self.output()[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.kind}: listeners {sorted(waiting)} not ready after "
                                   f"{START_TIMEOUT_S} s")
            for name, port in list(waiting.items()):
                if name == PLAINTEXT:
                    if answers_kafka_protocol(port):
                        del waiting[name]
                else:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=2).close()
                        del waiting[name]
                    except OSError:
                        pass
            if waiting:
                time.sleep(READY_POLL_S)

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def client_config(broker: SecureBroker, listener: str, ca: Path) -> dict[str, Any]:
    """librdkafka settings to reach ``listener`` of ``broker``."""
    conf: dict[str, Any] = {"bootstrap.servers": broker.address(listener),
                            "security.protocol": listener}
    if listener in (SSL_, SASL_SSL):
        conf["ssl.ca.location"] = str(ca)
    if listener in (SASL_SSL, SASL_PLAINTEXT):
        conf.update({"sasl.mechanism": MECHANISM, "sasl.username": SCRAM_USER,
                     "sasl.password": SCRAM_PASSWORD})
    return conf


def topic_of(listener: str, warm: bool = False) -> str:
    return f"bench-{listener.lower().replace('_', '-')}" + ("-warm-up" if warm else "")


def prepare(broker: SecureBroker, listeners: Sequence[str]) -> None:
    """Topics (one per listener, one more for its warm-up) and, on Odradek, the SCRAM
    user, all through the PLAINTEXT listener."""
    admin = AdminClient({"bootstrap.servers": broker.address(PLAINTEXT)})
    topics = [NewTopic(topic_of(lst, warm), num_partitions=1, replication_factor=1)
              for lst in listeners for warm in (False, True)]
    for future in admin.create_topics(topics, operation_timeout=10,
                                      request_timeout=15).values():
        future.result(timeout=30)
    if broker.kind == ODRADEK:
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            SCRAM_PASSWORD.encode())])
        for future in futures.values():
            future.result(timeout=30)


# --- loads ----------------------------------------------------------------------------


def produce(broker: SecureBroker, conf: dict[str, Any], topic: str, n: int,
            value_bytes: int) -> Measured:
    """broker_bench.produce, with the listener's client settings."""
    return broker_bench.produce(broker, n, value_bytes, topic, conf)


def consume(broker: SecureBroker, conf: dict[str, Any], topic: str, n: int) -> Measured:
    """broker_bench.consume (after its untimed one-record consumer), with the listener's
    client settings."""
    return broker_bench.consume(broker, n, topic=topic, conf=conf)


def scram_login(port: int, context: ssl.SSLContext | None) -> None:
    """One SCRAM-SHA-512 login on a new connection: SaslHandshake v1, SaslAuthenticate v2
    twice; the server's signature is checked by scramp."""
    client = WireClient(port)
    try:
        if context is not None:
            client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
        shake = client.request(17, 1, {"mechanism": MECHANISM})
        if shake.error_code.value != 0:
            raise RuntimeError(f"SaslHandshake: {shake}")
        scram = ScramClient([MECHANISM], SCRAM_USER, SCRAM_PASSWORD)
        first = client.request(36, 2, {"auth_bytes": scram.get_client_first().encode()})
        if first.error_code.value != 0:
            raise RuntimeError(f"SaslAuthenticate (client-first): {first.error_message}")
        scram.set_server_first(bytes(first.auth_bytes).decode())
        final = client.request(36, 2, {"auth_bytes": scram.get_client_final().encode()})
        if final.error_code.value != 0:
            raise RuntimeError(f"SaslAuthenticate (client-final): {final.error_message}")
        scram.set_server_final(bytes(final.auth_bytes).decode())
    finally:
        client.close()


def login_loop(broker: SecureBroker, listener: str, ca: Path, seconds: float) -> dict[str, Any]:
    context = None
    if listener == SASL_SSL:
        context = ssl.create_default_context(cafile=str(ca))
    port = broker.ports[listener]
    scram_login(port, context)  # untimed: the broker's first login imports its code
    logins = 0
    cpu0, self0 = broker.cpu_s(), self_cpu_s()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        scram_login(port, context)
        logins += 1
    t1 = time.perf_counter()
    cpu1, self1 = broker.cpu_s(), self_cpu_s()
    broker_cpu, client_cpu = cpu1 - cpu0, self1 - self0
    return {
        "logins": logins, "seconds": round(t1 - t0, 3),
        "logins_s": round(logins / (t1 - t0), 1),
        "broker_cpu_s": round(broker_cpu, 4),
        "broker_cpu_ms_per_login": round(broker_cpu / logins * 1000, 3),
        "broker_logins_per_cpu_s": round(logins / broker_cpu, 1) if broker_cpu else None,
        "client_cpu_ms_per_login": round(client_cpu / logins * 1000, 3),
    }


# --- rounds ---------------------------------------------------------------------------


def one_round(kind: str, index: int, args: argparse.Namespace, tmp_root: str, ca: Path,
              keystore: Path) -> dict[str, Any]:
    listeners = LOAD_LISTENERS[kind] if index % 2 == 0 else LOAD_LISTENERS[kind][::-1]
    try:
        broker = SecureBroker(kind, tmp_root, keystore)
    except (RuntimeError, TimeoutError, subprocess.SubprocessError) as exc:
        note(f"  {kind} did not start: {exc}")
        return {"failed": f"broker did not start: {str(exc)[:400]}"}
    out: dict[str, Any] = {"startup_s": round(broker.startup_s, 3),
                           "listener_order": list(listeners)}
    note(f"  {kind} ready {broker.startup_s:.2f} s after its start, listeners "
         + ", ".join(f"{k}:{v}" for k, v in broker.ports.items()))
    try:
        prepare(broker, listeners)
        for listener in listeners:
            conf = client_config(broker, listener, ca)
            res: dict[str, Any] = {}
            try:
                if args.warm_up_records:
                    warm_topic = topic_of(listener, warm=True)
                    cpu0, t0 = broker.cpu_s(), time.perf_counter()
                    produce(broker, conf, warm_topic, args.warm_up_records, args.value_bytes)
                    consume(broker, conf, warm_topic, args.warm_up_records)
                    res["warm_up"] = {"seconds": round(time.perf_counter() - t0, 3),
                                      "broker_cpu_s": round(broker.cpu_s() - cpu0, 3)}
                topic = topic_of(listener)
                res["produce"] = produce(broker, conf, topic, args.records,
                                         args.value_bytes).as_dict()
                res["consume"] = consume(broker, conf, topic, args.records).as_dict()
                for wl in WORKLOADS:
                    note(f"  {kind} {listener} {wl}: {res[wl]['records_s']:,} rec/s, "
                         f"{res[wl]['broker_cpu_s_per_m']} broker CPU s/M")
            except (RuntimeError, KafkaException) as exc:
                note(f"  {kind} {listener} failed: {exc}")
                res["failed"] = str(exc)[:500]
            out[listener] = res
        if kind == ODRADEK and args.login_seconds > 0:
            out["logins"] = {}
            for listener in (SASL_PLAINTEXT, SASL_SSL):
                try:
                    r = login_loop(broker, listener, ca, args.login_seconds)
                    note(f"  {kind} SCRAM logins over {listener}: {r['logins_s']}/s, "
                         f"{r['broker_cpu_ms_per_login']} broker CPU ms per login")
                except (RuntimeError, OSError) as exc:
                    note(f"  {kind} SCRAM logins over {listener} failed: {exc}")
                    r = {"failed": str(exc)[:500]}
                out["logins"][listener] = r
        out["peak_rss_mib"] = round(broker.peak_rss_mib(), 1)
    finally:
        rc = broker.stop()
    if kind == ODRADEK and rc != 0:
        note(f"warning: odradek exited with {rc} on SIGTERM")
    return {**out, "exit_code": rc}


# --- report ---------------------------------------------------------------------------


def _median_ratio(pairs: list[tuple[float, float]]) -> float | None:
    ratios = [a / b for a, b in pairs if b]
    return round(statistics.median(ratios), 3) if ratios else None


def _run(rnd: dict[str, Any], system: str, listener: str, wl: str) -> dict[str, Any] | None:
    r = rnd.get(system, {}).get(listener, {})
    return r.get(wl) if "failed" not in r else None


def _pair_ratio(rounds: list[dict[str, Any]], a: tuple[str, str], b: tuple[str, str],
                wl: str, key: str) -> float | None:
    pairs = []
    for rnd in rounds:
        ra, rb = _run(rnd, *a, wl), _run(rnd, *b, wl)
        if ra and rb:
            pairs.append((ra[key], rb[key]))
    return _median_ratio(pairs)


def summarize(rounds: list[dict[str, Any]], systems: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"loads": {}, "ratios": [], "targets": [], "logins": {}}
    for system in systems:
        for listener in LOAD_LISTENERS[system]:
            for wl in WORKLOADS:
                runs = [r for rnd in rounds if (r := _run(rnd, system, listener, wl))]
                key = f"{system}/{listener}/{wl}"
                if not runs:
                    out["loads"][key] = {"failed": "no successful run"}
                    continue
                out["loads"][key] = {
                    **{k: statistics.median(r[k] for r in runs)
                       for k in ("records_s", "broker_cpu_s_per_m", "client_cpu_s_per_m",
                                 "broker_cpu_util")},
                    "records_s_all": [r["records_s"] for r in runs],
                    "broker_cpu_s_per_m_all": [r["broker_cpu_s_per_m"] for r in runs],
                }
    for what, a, b in OTHER_RATIOS:
        if a[0] in systems and b[0] in systems:
            for wl in WORKLOADS:
                out["ratios"].append({
                    "what": what, "workload": wl,
                    "cpu_per_record": _pair_ratio(rounds, a, b, wl, "broker_cpu_s_per_m"),
                    "throughput": _pair_ratio(rounds, a, b, wl, "records_s")})
    for what, sa, la, sb, lb, wl, bound in TARGETS:
        if sa not in systems or sb not in systems:
            continue
        value = _pair_ratio(rounds, (sa, la), (sb, lb), wl, "broker_cpu_s_per_m")
        out["targets"].append({
            "target": what, "workload": wl, "ratio": value, "bound": f"<= {bound}",
            "met": None if value is None else value <= bound,
            "throughput_ratio": _pair_ratio(rounds, (sa, la), (sb, lb), wl, "records_s")})
    for listener in (SASL_PLAINTEXT, SASL_SSL):
        runs = [rnd[ODRADEK]["logins"][listener] for rnd in rounds
                if "failed" not in rnd.get(ODRADEK, {}).get("logins", {}).get(
                    listener, {"failed": ""})]
        if runs:
            out["logins"][listener] = {
                k: statistics.median(r[k] for r in runs)
                for k in ("logins_s", "broker_cpu_ms_per_login", "client_cpu_ms_per_login")}
            out["logins"][listener]["logins_s_all"] = [r["logins_s"] for r in runs]
    return out


def markdown(results: dict[str, Any]) -> str:
    m, p, s = results["machine"], results["params"], results["summary"]
    systems = p["systems"]
    lines = [
        f"machine: {broker_machine_line(m)}" + (f", {m['java']}" if m.get("java") else ""),
        f"workload: {p['records']:,} records of {p['value_bytes']}-byte values per listener, "
        "1 partition, confluent-kafka (acks=1, linger.ms=5, no compression), consumer "
        f"assigned to partition 0; {p['warm_up_records']:,} records produced and consumed "
        "untimed through each listener first; "
        f"{p['rounds']} rounds, systems and listeners alternating (ABBA); medians of rounds, "
        "ratios medians of per-round ratios",
        "",
        "| system | listener | workload | records/s | broker CPU s per M records "
        "| client CPU s per M | records/s per round |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for system in systems:
        for listener in LOAD_LISTENERS[system]:
            for wl in WORKLOADS:
                r = s["loads"][f"{system}/{listener}/{wl}"]
                if "failed" in r:
                    lines.append(f"| {LABELS[system]} | {LISTENER_LABELS[listener]} | {wl} "
                                 f"| failed | | | |")
                    continue
                per = ", ".join(f"{x:,.0f}" for x in r["records_s_all"])
                lines.append(
                    f"| {LABELS[system]} | {LISTENER_LABELS[listener]} | {wl} "
                    f"| {r['records_s']:,.0f} | {r['broker_cpu_s_per_m']:.3f} "
                    f"| {r['client_cpu_s_per_m']:.2f} | {per} |")
    lines += ["", "| issue 18 target (broker CPU per record) | ratio | target | met "
              "| records/s ratio |", "|---|---:|---:|---|---:|"]
    for t in s["targets"]:
        ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}"
        met = {True: "**met**", False: "**not met**", None: "n/a"}[t["met"]]
        thr = "n/a" if t["throughput_ratio"] is None else f"{t['throughput_ratio']:.2f}"
        lines.append(f"| {t['target']} | {ratio} | {t['bound']} | {met} | {thr} |")
    lines += ["", "| other ratio | workload | broker CPU per record | records/s |",
              "|---|---|---:|---:|"]
    for r in s["ratios"]:
        cpu = "n/a" if r["cpu_per_record"] is None else f"{r['cpu_per_record']:.2f}"
        thr = "n/a" if r["throughput"] is None else f"{r['throughput']:.2f}"
        lines.append(f"| {r['what']} | {r['workload']} | {cpu} | {thr} |")
    if s["logins"]:
        lines += ["", f"Authentication cost, Odradek: {MECHANISM} logins one connection at a "
                  f"time for {p['login_seconds']:g} s (connect, SaslHandshake v1, "
                  "SaslAuthenticate v2 x2, close; the client derives the salted password, "
                  f"{SCRAM_ITERATIONS} iterations, every login)", "",
                  "| listener | logins/s (the loop) | broker CPU ms per login "
                  "| logins per broker CPU s | client CPU ms per login | logins/s per round |",
                  "|---|---:|---:|---:|---:|---|"]
        for listener, r in s["logins"].items():
            per = ", ".join(f"{x:,.0f}" for x in r["logins_s_all"])
            cap = 1000 / r["broker_cpu_ms_per_login"] if r["broker_cpu_ms_per_login"] else 0
            lines.append(f"| {listener} | {r['logins_s']:,.0f} "
                         f"| {r['broker_cpu_ms_per_login']:.2f} | {cap:,.0f} "
                         f"| {r['client_cpu_ms_per_login']:.2f} | {per} |")
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=1_000_000,
                    help="records produced and consumed per listener and round "
                         "(default 1,000,000)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per system (default 2)")
    ap.add_argument("--value-bytes", type=int, default=100, help="record value size (100)")
    ap.add_argument("--warm-up-records", type=int, default=100_000,
                    help="records produced and consumed untimed through each listener "
                         "before its timed parts (default 100,000; 0: none)")
    ap.add_argument("--login-seconds", type=float, default=5.0,
                    help="length of each SCRAM login loop (default 5; 0 skips them)")
    ap.add_argument("--no-kafka", action="store_true", help="Odradek only")
    ap.add_argument("--dir", default="/tmp",
                    help="where the brokers' temporary data dirs go (default /tmp)")
    ap.add_argument("--out", default=str(here / "results" / "security.json"),
                    help="JSON results file (default bench/results/security.json)")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rounds < 1 or args.records < 1:
        raise SystemExit("--rounds and --records must be at least 1")
    systems = [ODRADEK] if args.no_kafka else [ODRADEK, KAFKA]
    if KAFKA in systems and not (kafka_jars_present() and shutil.which("java")):
        raise SystemExit("Apache Kafka needs java and Kafka's jars: bash scripts/fetch_jvm.sh "
                         "(or --no-kafka)")
    tmp_root = tempfile.mkdtemp(prefix="odradek-security-bench-", dir=args.dir)
    ca = TestCA(Path(tmp_root) / "certs")
    keystore = ca.issue("broker", "CN=localhost", server=True).keystore()
    results: dict[str, Any] = {
        "benchmark": "security",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([shown_path(sys.executable), *sys.argv]),
        "machine": broker_machine_info(
            **({"java": java_version()} if KAFKA in systems else {}),
            openssl=ssl.OPENSSL_VERSION),
        "params": {
            "records": args.records, "rounds": args.rounds, "value_bytes": args.value_bytes,
            "warm_up_records": args.warm_up_records, "login_seconds": args.login_seconds,
            "systems": systems, "partitions": 1, "producer": LOAD_PRODUCER,
            "certificates": "devcluster/certs.py TestCA: EC P-256 CA and server key, SHA-256 "
                            "signatures; one-way TLS, client checks the CA and the name",
            "scram": {"mechanism": MECHANISM, "iterations": SCRAM_ITERATIONS},
            "odradek": "odradek serve, listeners PLAINTEXT, SSL, SASL_SSL, SASL_PLAINTEXT on "
                       "127.0.0.1, ssl.keystore.location PEM, fresh data dir per round",
            "kafka": f"Apache Kafka {KAFKA_VERSION}, one KRaft node, -Xmx1G -Xms1G "
                     "(devcluster/apache_kafka.py), listeners PLAINTEXT and SSL "
                     "(ssl.keystore.type=PEM), fresh log dir per round",
        },
    }
    rounds: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            order = systems if i % 2 == 0 else systems[::-1]
            rnd: dict[str, Any] = {}
            for kind in order:
                note(f"round {i + 1}/{args.rounds}: {kind}, {args.records:,} records per "
                     "listener ...")
                rnd[kind] = one_round(kind, i, args, tmp_root, ca.cert, keystore)
            rounds.append(rnd)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    results["rounds"] = rounds
    results["summary"] = summarize(rounds, systems)
    return finish(results, markdown(results), args.out)


if __name__ == "__main__":
    sys.exit(main())
