"""Kafka's JVM artifacts in the tests: ``odradek.devcluster.jvm``'s, with what a missing
one means here. A test that needs the jars skips with a clear reason when they are
missing and the run is not CI (``bash scripts/test.sh`` fetches them first; CI=true
makes a missing jar a failure, so CI never passes by skipping); a missing java or javac,
or Java that does not compile, fails the test.

    from tests.jvm import compile_java, java_command

    classes = compile_java(Path("tests/interop/java"))
    subprocess.run(java_command("ProduceAll", "--bootstrap", bootstrap,
                                classpath_extra=[classes]))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from odradek.devcluster import connect, jvm
from odradek.devcluster.jvm import LIB, JvmError

__all__ = ["LIB", "compile_java", "java_command", "require_connect_jars", "require_jars"]


def _require(check: Callable[[], None]) -> None:
    try:
        check()
    except JvmError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def require_jars() -> None:
    """Skip (locally) or fail (CI) when scripts/fetch_jvm.sh has not run."""
    _require(jvm.require_jars)


def require_connect_jars() -> None:
    """The same for Kafka Connect's jars (.cache/connect/lib, also scripts/fetch_jvm.sh)."""
    _require(connect.require_connect_jars)


def compile_java(sources: Path) -> Path:
    require_jars()
    try:
        return jvm.compile_java(sources)
    except JvmError as exc:
        pytest.fail(str(exc), pytrace=False)


def java_command(main_class: str, *args: str, classpath_extra: Sequence[Path] = (),
                 jvm_args: Sequence[str] = ()) -> list[str]:
    require_jars()
    try:
        return jvm.java_command(main_class, *args, classpath_extra=classpath_extra,
                                jvm_args=jvm_args)
    except JvmError as exc:
        pytest.fail(str(exc), pytrace=False)
