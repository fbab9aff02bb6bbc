"""A private S3-compatible server for tiered storage on one machine: moto's standalone
server (``moto[server]`` from PyPI, a test dependency), started on 127.0.0.1 and a free
port. It speaks the S3 REST protocol (signed requests, multipart uploads, ranged GETs)
and keeps objects in its memory: a stop loses them, so faults are made by pausing it
(SIGSTOP: every request hangs until SIGCONT).

By default it checks no signatures (any credentials do). ``authenticated=True`` makes it
check them as S3 does: a user with an access key and an s3:* policy is made through
moto's IAM API in its first unauthenticated requests (INITIAL_NO_AUTH_ACTION_COUNT), and
from then on only that key, rightly signed, is let in (``rsm_config`` gives it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from odradek.devcluster.processes import ClusterError, free_port, read_log, spawn, stop_process

INSTALL_HINT = "an S3 server here needs moto's standalone server: pip install 'moto[server]'"
ACCESS_KEY = "odradek-test"
SECRET_KEY = "odradek-test-secret"
REGION = "us-east-1"
_IAM_USER = "odradek"
_IAM_SETUP = ("CreateUser", "CreateAccessKey", "PutUserPolicy")  # unauthenticated


class S3Server:
    """``python -m moto.server`` on 127.0.0.1:``port``, its output in ``directory``."""

    def __init__(self, directory: Path | str, port: int | None = None, *,
                 authenticated: bool = False) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self.log_path = self.directory / "s3.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.authenticated = authenticated
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> S3Server:
        try:
            import moto.server  # noqa: F401
        except ImportError:
            raise ClusterError(INSTALL_HINT) from None
        env = dict(os.environ)
        if self.authenticated:
            # The readiness probe below reaches it once, then the IAM set-up's requests.
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(1 + len(_IAM_SETUP))
        self.process = spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                              "-p", str(self.port)], self.log_path, env=env,
                             die_with_parent=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ClusterError(f"the S3 server exited: {read_log(self.log_path, 20)}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
            except urllib.error.HTTPError:
                pass  # answering (403 once it checks signatures)
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
                continue
            if self.authenticated:
                self._make_user()
            return self
        raise ClusterError(f"the S3 server did not answer in {timeout_s} s")

    def _client(self, service: str) -> Any:
        import boto3  # moto's own dependency

        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)

    def _make_user(self) -> None:
        """The user whose key is let in (the first, unauthenticated, requests)."""
        iam = self._client("iam")
        iam.create_user(UserName=_IAM_USER)
        key = iam.create_access_key(UserName=_IAM_USER)["AccessKey"]
        iam.put_user_policy(UserName=_IAM_USER, PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]

    def create_bucket(self, name: str) -> None:
        if self.authenticated:
            self._client("s3").create_bucket(Bucket=name)
            return
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(request, timeout=10).close()

    def rsm_config(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """The broker settings of a remote tier in ``bucket`` of this server."""
        settings = {
            "rsm.config.storage.backend.class": "s3",
            "rsm.config.storage.s3.bucket.name": bucket,
            "rsm.config.storage.s3.endpoint.url": self.endpoint,
            "rsm.config.storage.s3.region": REGION,
            "rsm.config.storage.aws.access.key.id": self.access_key,
            "rsm.config.storage.aws.secret.access.key": self.secret_key,
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


class S3FaultProxy:
    """An HTTP proxy in front of an S3 server that can fail on request: ``mode`` "pass"
    forwards every request as it is, "503" answers each with 503 SlowDown (S3's
    throttling answer, which clients retry), "500" with 500 InternalError. For tests of
    a store that refuses rather than hangs (``S3Server.pause``)."""

    def __init__(self, target: str) -> None:
        import http.server
        import threading

        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port))
        self.mode = "pass"
        self.answered: dict[str, int] = {}
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                mode = proxy.mode
                proxy.answered[mode] = proxy.answered.get(mode, 0) + 1
                if mode in ("500", "503"):
                    code = "SlowDown" if mode == "503" else "InternalError"
                    data = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}'
                            f"</Code><Message>injected</Message></Error>").encode()
                    self.send_response(int(mode))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                import http.client

                conn = http.client.HTTPConnection(*proxy.target, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("connection", "transfer-encoding")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status, answer.reason)
                    for k, v in answer.getheaders():
                        if k.lower() not in ("connection", "transfer-encoding",
                                             "content-length"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="s3-fault-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
