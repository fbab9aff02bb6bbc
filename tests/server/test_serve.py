"""``odradek serve`` as an operator runs it: startup banner, clean stop on SIGTERM and
SIGINT, restarts (clean and after kill -9) serve everything acknowledged, configuration
precedence and errors, one process per data directory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.server.config import load_config
from odradek.server.settings import ConfigError


@contextmanager
def serve(data_dir: str, *args: str, env: dict[str, str] | None = None) -> Iterator[dict]:
    """Run ``odradek serve`` on a free port; yields {"proc", "port", "out"}."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", data_dir, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **(env or {})},
    )
    lines: list[str] = []
    ready = threading.Event()
    info: dict = {"proc": proc, "out": lines}

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            found = re.search(r"^Odradek \S+ listening on [^\s:]+:(\d+)", line)
            if found and "port" not in info:
                info["port"] = int(found.group(1))
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert ready.wait(30), "broker did not start"
        assert "port" in info, "".join(lines)
        yield info
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(5)


def produce(port: int, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all"})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(20) == 0


def consume(port: int, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "x",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(out) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            out.append(message.value())
    consumer.close()
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_broker_cleanly_and_a_restart_serves_everything(tmp_path, sig):
    data = str(tmp_path / "data")
    values = [b"record-%d" % i for i in range(100)]
    with serve(data) as run:
        out = "".join(run["out"])
        assert f"data directory: {data}" in out
        assert "effective config:" in out and "log.retention.ms = 604800000" in out
        produce(run["port"], "kept", values)
        run["proc"].send_signal(sig)
        assert run["proc"].wait(30) == 0
    assert os.path.exists(os.path.join(data, ".kafka_cleanshutdown"))
    with serve(data) as run:
        assert consume(run["port"], "kept", 100) == values


def test_what_the_start_built_is_out_of_the_cycle_collectors_way(tmp_path):
    """A full collection walks every object the collector tracks, with the event loop
    stopped; the start's (modules, schemas, loaded logs) are frozen out of it once the
    broker is up, so a later full collection walks only what came after."""
    data = str(tmp_path / "data")
    with serve(data, "--override", "log.level.odradek.server.run=DEBUG") as run:
        deadline = time.monotonic() + 30
        while not (said := re.search(r"(\d+) objects of the start frozen", "".join(run["out"]))):
            assert time.monotonic() < deadline, "".join(run["out"])
            time.sleep(0.05)
        assert int(said.group(1)) > 10_000  # modules and schemas alone: tens of thousands
        values = [b"after-%d" % i for i in range(10)]
        produce(run["port"], "served", values)
        assert consume(run["port"], "served", 10) == values


SIGNAL_DURING_START = r"""
import os, signal, sys
from odradek.cli.main import main
from odradek.server.broker import Broker

real_start = Broker.start

async def start_while_signalled(self):
    os.kill(os.getpid(), signal.SIGTERM)  # an operator's SIGTERM during a long recovery
    await real_start(self)

Broker.start = start_while_signalled
sys.exit(main(["serve", "--listen", "127.0.0.1:0", "--data-dir", sys.argv[1]]))
"""


def test_a_signal_during_startup_stops_the_broker_cleanly_once_started(tmp_path):
    """Recovering thousands of logs can take seconds; a SIGTERM meanwhile must not kill the
    process mid-recovery (an unclean stop): it is acted on once the start is done."""
    data = str(tmp_path / "data")
    proc = subprocess.run([sys.executable, "-c", SIGNAL_DURING_START, data],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stopping on signal" in proc.stdout + proc.stderr
    assert os.path.exists(os.path.join(data, ".kafka_cleanshutdown"))


def test_kill_9_loses_no_acknowledged_record(tmp_path):
    data = str(tmp_path / "data")
    values = [b"durable-%d" % i for i in range(500)]
    with serve(data) as run:
        produce(run["port"], "acked", values)
        run["proc"].send_signal(signal.SIGKILL)
        run["proc"].wait(10)
    assert not os.path.exists(os.path.join(data, ".kafka_cleanshutdown"))
    with serve(data) as run:
        assert consume(run["port"], "acked", 500) == values


def test_a_second_broker_on_the_same_data_directory_is_refused(tmp_path):
    data = str(tmp_path / "data")
    with serve(data):
        second = subprocess.run(
            [sys.executable, "-m", "odradek", "serve", "--listen", "127.0.0.1:0",
             "--data-dir", data], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "in use by another process" in second.stderr


def test_bad_settings_stop_startup_with_a_message_naming_them(tmp_path):
    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "odradek", "serve", "--data-dir", str(tmp_path), *args],
            capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})

    done = start("--override", "log.retention.ms=soon")
    assert done.returncode == 2 and "log.retention.ms must be an integer" in done.stderr
    done = start(env={"ODRADEK_NO_SUCH_THING": "1"})
    assert done.returncode == 2 and "ODRADEK_NO_SUCH_THING" in done.stderr
    config = tmp_path / "broker.toml"
    config.write_text('"num.partitions" = 0\n')
    done = start("--config", str(config))
    assert done.returncode == 2 and "num.partitions must be at least 1" in done.stderr
    assert f"file {config}" in done.stderr
    done = start("--listen", "nowhere")
    assert done.returncode == 2 and "HOST:PORT" in done.stderr


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('"num.partitions" = 2\n"log.retention.ms" = 1000\n'
                      '"message.max.bytes" = 5000\nlisten = "127.0.0.1:1234"\n')
    cfg = load_config(config_file=str(config), overrides={"message.max.bytes": "7000"},
                      environ={"ODRADEK_LOG_RETENTION_MS": "2000"})
    assert cfg["num.partitions"] == 2
    assert cfg["log.retention.ms"] == 2000
    assert cfg["message.max.bytes"] == 7000
    assert cfg["auto.create.topics.enable"] is True
    assert (cfg.host, cfg.port) == ("127.0.0.1", 1234)
    assert cfg.sources["log.retention.ms"] == "environment ODRADEK_LOG_RETENTION_MS"
    assert cfg.log_config().retention_ms == 2000  # the log.* default of retention.ms
    assert load_config(listen="0.0.0.0:9", environ={}).port == 9
    assert load_config(environ={}, overrides={"log.retention.hours": 2})[
        "log.retention.ms"] == 7_200_000


def test_unknown_and_ill_typed_settings_are_errors():
    with pytest.raises(ConfigError, match=r"unknown setting 'log\.retention\.forever'"):
        load_config(overrides={"log.retention.forever": 1}, environ={})
    with pytest.raises(ConfigError, match="must be true or false"):
        load_config(overrides={"auto.create.topics.enable": "maybe"}, environ={})
    with pytest.raises(ConfigError, match="one of"):
        load_config(overrides={"log.cleanup.policy": "shred"}, environ={})
