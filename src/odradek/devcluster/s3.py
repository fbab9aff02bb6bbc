"""A private S3-compatible server for tiered storage on one machine: moto's standalone
server (``moto[server]`` from PyPI, a test dependency), started on 127.0.0.1 and a free
port. It speaks the S3 REST protocol (signed requests, multipart uploads, ranged GETs)
and keeps objects in its memory: a stop loses them, so faults are made by pausing it
(SIGSTOP: every request hangs until SIGCONT) or by a second server the client cannot
reach."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from odradek.devcluster.processes import ClusterError, free_port, read_log, spawn, stop_process

INSTALL_HINT = "an S3 server here needs moto's standalone server: pip install 'moto[server]'"
ACCESS_KEY = "odradek-test"
SECRET_KEY = "odradek-test-secret"
REGION = "us-east-1"


class S3Server:
    """``python -m moto.server`` on 127.0.0.1:``port``, its output in ``directory``."""

    def __init__(self, directory: Path | str, port: int | None = None) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self.log_path = self.directory / "s3.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> S3Server:
        try:
            import moto.server  # noqa: F401
        except ImportError:
            raise ClusterError(INSTALL_HINT) from None
        self.process = spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                              "-p", str(self.port)], self.log_path, die_with_parent=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ClusterError(f"the S3 server exited: {read_log(self.log_path, 20)}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise ClusterError(f"the S3 server did not answer in {timeout_s} s")

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(request, timeout=10).close()

    def rsm_config(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """The broker settings of a remote tier in ``bucket`` of this server."""
        settings = {
            "rsm.config.storage.backend.class": "s3",
            "rsm.config.storage.s3.bucket.name": bucket,
            "rsm.config.storage.s3.endpoint.url": self.endpoint,
            "rsm.config.storage.s3.region": REGION,
            "rsm.config.storage.aws.access.key.id": ACCESS_KEY,
            "rsm.config.storage.aws.secret.access.key": SECRET_KEY,
        }
        if prefix:
            settings["rsm.config.key.prefix"] = prefix
        return settings

    def pause(self) -> None:
        """Every request hangs (a store that stopped answering) until ``resume``."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.paused:
            with contextlib.suppress(ProcessLookupError):
                self.resume()
        stop_process(self.process, 10.0)
        self.process = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
