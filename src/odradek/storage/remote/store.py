"""The remote tier's object stores: an S3-compatible bucket, or a local directory.

Both are configured with the ``rsm.config.*`` settings of a Kafka remote storage
manager, under the names of Aiven's open-source plugin for Apache Kafka (the one
Kafka users of S3 tiered storage meet): ``storage.backend.class`` (``s3`` or
``filesystem``, or the plugin's class names), ``storage.s3.bucket.name``,
``storage.s3.region``, ``storage.s3.endpoint.url``, ``storage.aws.access.key.id``,
``storage.aws.secret.access.key``, ``storage.root`` and ``key.prefix``.

S3 goes through ``obstore`` (the Python binding of the Rust ``object_store`` crate
that Apache Arrow's ecosystem uses): uploads read the segment file and sign
requests in Rust with the GIL released, so the broker's event loop keeps
serving while a gigabyte goes up; multipart uploads, retries with back-off and
timeouts are its own. boto3 would do the same work in Python on the GIL.

Every call is blocking: the remote log manager and the remote reader call them from
their own threads. Errors come out as ``RemoteStorageError``; a missing object as
``RemoteObjectMissing``; ``check`` tells a wrong bucket or credentials at startup.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any, BinaryIO, Protocol

from odradek.storage.errors import InvalidConfigError, RemoteStorageError

CONFIG_PREFIX = "rsm.config."
S3_BACKENDS = ("s3", "io.aiven.kafka.tieredstorage.storage.s3.S3Storage")
FILESYSTEM_BACKENDS = ("filesystem",
                       "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage")
PROBE_KEY = ".odradek-probe"
_S3_CODE = re.compile(r"<Code>(\w+)</Code>")


class RemoteObjectMissing(RemoteStorageError):
    """An object the remote metadata names is not in the store."""


class ObjectStore(Protocol):
    description: str

    def put_file(self, key: str, f: BinaryIO, size: int) -> None:
        """Store ``size`` bytes read from ``f`` (from its current position) under
        ``key``, whole or not at all."""

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the object's end)."""

    def list(self, prefix: str) -> list[str]:
        """The keys under ``prefix`` (relative to the store's own prefix)."""

    def delete(self, key: str) -> None:
        """Remove ``key``; a key already gone is no error."""

    def check(self) -> None:
        """Write and delete a probe object: raises InvalidConfigError naming the setting
        at fault (bucket, credentials, root), or RemoteStorageError if the store is
        unreachable now."""


class FileSystemStore:
    """Objects as files under a root directory (tests, and a single node whose history
    lives on another, larger or cheaper, mount). Writes go to a temporary name and are
    renamed into place, so an object is whole or absent."""

    def __init__(self, root: str, prefix: str = "") -> None:
        self.root = os.path.abspath(root)
        self.prefix = prefix
        self.description = f"directory {self.root}"

    def _path(self, key: str) -> str:
        return os.path.join(self.root, self.prefix + key)

    def _write(self, key: str, write: Any) -> None:
        path = self._path(key)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as out:
                write(out)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise RemoteStorageError(f"cannot write {path}: {exc}") from exc

    def put_file(self, key: str, f: BinaryIO, size: int) -> None:
        def write(out: BinaryIO) -> None:
            left = size
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    raise OSError(f"source ended {left} bytes early")
                out.write(chunk)
                left -= len(chunk)

        self._write(key, write)

    def put(self, key: str, data: bytes) -> None:
        self._write(key, lambda out: out.write(data))

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise RemoteObjectMissing(f"{self._path(key)} is missing") from None
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {self._path(key)}: {exc}") from exc

    def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            raise RemoteObjectMissing(f"{self._path(key)} is missing") from None
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {self._path(key)}: {exc}") from exc
        try:
            return os.pread(fd, length, start)
        finally:
            os.close(fd)

    def list(self, prefix: str) -> list[str]:
        top = self._path(prefix)
        base = os.path.join(self.root, self.prefix)
        keys = []
        for directory, _, files in os.walk(top if os.path.isdir(top) else os.path.dirname(top)):
            for name in files:
                if name.endswith(".tmp"):
                    continue
                key = os.path.relpath(os.path.join(directory, name), base)
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise RemoteStorageError(f"cannot delete {self._path(key)}: {exc}") from exc

    def check(self) -> None:
        if not os.path.isdir(self.root):
            raise InvalidConfigError(
                f"{CONFIG_PREFIX}storage.root: {self.root} is not a directory")
        try:
            self.put(PROBE_KEY, b"probe")
            self.delete(PROBE_KEY)
        except RemoteStorageError as exc:
            raise InvalidConfigError(f"{CONFIG_PREFIX}storage.root: {exc}") from None


class S3Store:
    """A bucket of an S3-compatible service, through obstore."""

    def __init__(self, bucket: str, *, prefix: str, endpoint: str | None, region: str,
                 access_key_id: str | None, secret_access_key: str | None,
                 path_style: bool, timeout_ms: int, max_retries: int) -> None:
        from obstore.store import S3Store as _S3

        options: dict[str, Any] = {"timeout": timedelta(milliseconds=timeout_ms),
                                   "connect_timeout": timedelta(milliseconds=timeout_ms)}
        config: dict[str, Any] = {"region": region,
                                  "virtual_hosted_style_request": not path_style}
        if endpoint:
            config["endpoint"] = endpoint
            options["allow_http"] = endpoint.startswith("http://")
        if access_key_id:
            config["access_key_id"] = access_key_id
        if secret_access_key:
            config["secret_access_key"] = secret_access_key
        retry = {"max_retries": max_retries, "backoff": {
            "init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2),
            "base": 2.0}, "retry_timeout": timedelta(milliseconds=timeout_ms)}
        self.bucket = bucket
        self.prefix = prefix
        self.description = f"s3://{bucket}/{prefix}" + (f" at {endpoint}" if endpoint else "")
        self._store = _S3(bucket, prefix=prefix or None, config=config,  # type: ignore[arg-type]
                          client_options=options, retry_config=retry)  # type: ignore[arg-type]

    def _fail(self, what: str, key: str, exc: Exception) -> RemoteStorageError:
        text = str(exc)
        first = text.split(": <?xml")[0].splitlines()[0] if text else type(exc).__name__
        code = _S3_CODE.search(text)  # S3's own error code, e.g. NoSuchBucket
        if code is not None:
            first += f" ({code.group(1)})"
        where = f"{what} {key!r} in {self.description}: {first}"
        if isinstance(exc, FileNotFoundError) and "NoSuchBucket" not in text:
            return RemoteObjectMissing(where)
        return RemoteStorageError(where)

    def put_file(self, key: str, f: BinaryIO, size: int) -> None:
        import obstore

        try:
            # Whole: a segment is at most segment.bytes; obstore switches to a multipart
            # upload past its chunk size and aborts it on failure.
            obstore.put(self._store, key, _chunks(f, size), chunk_size=8 << 20)
        except Exception as exc:
            raise self._fail("cannot upload", key, exc) from exc

    def put(self, key: str, data: bytes) -> None:
        import obstore

        try:
            obstore.put(self._store, key, data)
        except Exception as exc:
            raise self._fail("cannot upload", key, exc) from exc

    def get(self, key: str) -> bytes:
        import obstore

        try:
            return bytes(obstore.get(self._store, key).bytes())
        except Exception as exc:
            raise self._fail("cannot read", key, exc) from exc

    def get_range(self, key: str, start: int, length: int) -> bytes:
        import obstore

        try:
            return bytes(obstore.get_range(self._store, key, start=start, length=length))
        except Exception as exc:
            if "Range" in str(exc) and "416" in str(exc):
                return b""
            raise self._fail("cannot read", key, exc) from exc

    def list(self, prefix: str) -> list[str]:
        import obstore

        try:
            return sorted(item["path"] for batch in obstore.list(self._store, prefix)
                          for item in batch)
        except Exception as exc:
            raise self._fail("cannot list", prefix, exc) from exc

    def delete(self, key: str) -> None:
        import obstore

        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._fail("cannot delete", key, exc) from exc

    def check(self) -> None:
        try:
            self.put(PROBE_KEY, b"probe")
            self.delete(PROBE_KEY)
        except RemoteStorageError as exc:
            text = str(exc)
            if "NoSuchBucket" in text:
                raise InvalidConfigError(
                    f"{CONFIG_PREFIX}storage.s3.bucket.name: bucket {self.bucket!r} does "
                    f"not exist ({text})") from None
            if any(word in text for word in ("403", "InvalidAccessKeyId",
                                             "SignatureDoesNotMatch", "AccessDenied")):
                raise InvalidConfigError(
                    f"{CONFIG_PREFIX}storage.aws.access.key.id / "
                    f"{CONFIG_PREFIX}storage.aws.secret.access.key: the store refused "
                    f"them ({text})") from None
            raise


def _chunks(f: BinaryIO, size: int, chunk: int = 8 << 20) -> Iterator[bytes]:
    """``size`` bytes of ``f`` in chunks: a rolled segment's size is read under the
    log's lock, and only that much of its file is the segment."""
    left = size
    while left > 0:
        data = f.read(min(chunk, left))
        if not data:
            raise OSError(f"segment file ended {left} bytes early")
        left -= len(data)
        yield data


def _flag(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"{CONFIG_PREFIX}{name} must be true or false, got {raw!r}")
    return text == "true"


def _number(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise InvalidConfigError(f"{CONFIG_PREFIX}{name} must be an integer, got {raw!r}") \
            from None


def open_store(settings: Mapping[str, str]) -> ObjectStore:
    """The store ``rsm.config.*`` ``settings`` (without the prefix) describe."""
    backend = settings.get("storage.backend.class", "")
    prefix = settings.get("key.prefix", "")
    if backend in FILESYSTEM_BACKENDS:
        root = settings.get("storage.root", "")
        if not root:
            raise InvalidConfigError(f"{CONFIG_PREFIX}storage.root must name a directory")
        return FileSystemStore(root, prefix)
    if backend in S3_BACKENDS:
        bucket = settings.get("storage.s3.bucket.name", "")
        if not bucket:
            raise InvalidConfigError(f"{CONFIG_PREFIX}storage.s3.bucket.name must be set")
        endpoint = settings.get("storage.s3.endpoint.url") or None
        return S3Store(
            bucket, prefix=prefix, endpoint=endpoint,
            region=settings.get("storage.s3.region", "us-east-1"),
            access_key_id=settings.get("storage.aws.access.key.id")
            or os.environ.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=settings.get("storage.aws.secret.access.key")
            or os.environ.get("AWS_SECRET_ACCESS_KEY"),
            path_style=_flag("storage.s3.path.style.access.enabled",
                             settings.get("storage.s3.path.style.access.enabled",
                                          "true" if endpoint else "false")),
            timeout_ms=_number("storage.s3.api.call.timeout",
                               settings.get("storage.s3.api.call.timeout", "10000")),
            max_retries=_number("storage.s3.max.retries",
                                settings.get("storage.s3.max.retries", "3")))
    raise InvalidConfigError(
        f"{CONFIG_PREFIX}storage.backend.class must be s3 or filesystem (or "
        f"{S3_BACKENDS[1]} / {FILESYSTEM_BACKENDS[1]}), got {backend!r}")

