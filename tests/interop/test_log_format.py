"""Structured logs (issue 19): ``odradek serve`` with ``log.format=json`` writes every
stderr line as one JSON object (time, level, logger, message, and the context a record
carries), ``log.level`` sets the broker's loggers' level and ``log.level.<logger>`` one
logger's, and an unknown level name stops start-up naming the setting."""

from __future__ import annotations

import datetime
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from .conftest import start_broker

pytestmark = pytest.mark.interop

WAIT = 30.0
KEYS = {"time", "level", "logger", "message"}
CONNECTION = "odradek.server.network.connection"


def records(lines: list[str]) -> list[dict[str, Any]]:
    """Every stderr line as the JSON object it must be."""
    out = []
    for line in lines:
        record = json.loads(line)  # fails the test on any line that is not JSON
        assert isinstance(record, dict) and record.keys() >= KEYS, line
        datetime.datetime.fromisoformat(record["time"])
        out.append(record)
    return out


def produce_and_send_a_bad_frame(bootstrap: str, host: str, port: int) -> str:
    """A producer's connections, then one that sends a negative frame size (closed by
    the broker with a warning); that one's local address, as the broker names it."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("logged", b"a record")
    assert producer.flush(WAIT) == 0
    with socket.create_connection((host, port), timeout=WAIT) as sock:
        sock.sendall(b"\xff\xff\xff\xff")
        assert sock.recv(1) == b""  # closed by the broker
        address, local_port = sock.getsockname()[:2]
    return f"{address}:{local_port}"


def test_json_lines_with_one_logger_at_debug_and_the_rest_at_warning(tmp_path: Path):
    config = tmp_path / "broker.toml"  # per-logger levels from the file, as from flags
    config.write_text(f'"log.level.{CONNECTION}" = "debug"\n"log.level" = "WARN"\n')
    with start_broker(tmp_path / "data", "--config", str(config),
                      "--override", "log.format=json") as broker:
        bad_peer = produce_and_send_a_bad_frame(broker.bootstrap, broker.host, broker.port)
        time.sleep(0.2)  # the broker's warning line reaches the pipe
    logged = records(broker.stderr_lines)

    # The one logger at DEBUG speaks at DEBUG: each connection accepted, with its context.
    accepted = [r for r in logged if r["logger"] == CONNECTION and r["level"] == "DEBUG"]
    assert len(accepted) >= 2  # the producer's (bootstrap and broker) and the bad one
    assert all(r["listener"] == "PLAINTEXT" and r["peer"] for r in accepted)
    # The connection closed after the bad frame: a warning naming its peer and listener.
    closed = [r for r in logged if r["level"] == "WARNING" and r.get("peer") == bad_peer]
    assert len(closed) == 1 and closed[0]["logger"] == CONNECTION
    assert closed[0]["listener"] == "PLAINTEXT"
    assert "negative frame size" in closed[0]["message"]
    # Every other logger stays at WARNING: none of the INFO lines a broker logs by
    # default (logs opened, topics created, listening, stopped; see the next test).
    assert not [r for r in logged if r["logger"] != CONNECTION
                and r["level"] in ("DEBUG", "INFO")]


def test_json_lines_at_the_default_levels(tmp_path: Path):
    with start_broker(tmp_path / "data", "--override", "log.format=json") as broker:
        produce_and_send_a_bad_frame(broker.bootstrap, broker.host, broker.port)
        time.sleep(0.2)
    logged = records(broker.stderr_lines)
    levels = {r["level"] for r in logged}
    assert "DEBUG" not in levels
    created = [r for r in logged if r["logger"] == "odradek.server.topology"
               and r["message"].startswith("created topic logged")]
    assert len(created) == 1 and created[0]["level"] == "INFO"
    assert any(r["message"] == "stopped; logs flushed and closed" for r in logged)


def test_text_is_the_default_format(tmp_path: Path):
    with start_broker(tmp_path / "data") as broker:
        pass
    assert any(line.startswith("INFO odradek.server.broker: ") for line in broker.stderr_lines)


def test_an_unknown_level_name_stops_start_up_naming_the_setting(tmp_path: Path):
    setting = "log.level.odradek.server.replication.fetcher"
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--override", f"{setting}=LOUD"],
        capture_output=True, text=True, timeout=WAIT, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert setting in done.stderr and "'LOUD'" in done.stderr and "DEBUG" in done.stderr
    assert "Odradek" not in done.stdout  # never started
