"""Kafka's JVM artifacts: the classpath scripts/fetch_jvm.sh fills (``.cache/jvm/lib`` of
the repository: kafka-clients, kafka-streams, kafka-tools, kafka_2.13 and their
dependencies, from jvm/pom.xml) and small Java programs compiled against it, for the
test suite's interop and oracle tiers and the benchmarks' Apache Kafka.

    classes = compile_java(Path("tests/interop/java"))      # javac once per source change
    subprocess.run(java_command("ProduceAll", "--bootstrap", bootstrap,
                                classpath_extra=[classes]))

Where the jars are: ``$ODRADEK_JVM_LIB`` if set, else ``.cache/jvm/lib`` of the
repository this package is installed from (an editable install, as scripts/test.sh
makes). A missing java, javac or jar raises ``JvmError`` naming what to install; the
test suite turns that into a skip or a failure (tests/jvm.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

# src/odradek/devcluster/jvm.py -> the repository's root.
REPO = Path(__file__).resolve().parents[3]
LIB = Path(os.environ.get("ODRADEK_JVM_LIB") or REPO / ".cache" / "jvm" / "lib")
CLASSES = LIB.parent / "classes"
# Kafka's clients log through slf4j-simple: warnings and errors only, on stderr.
LOGGING = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
           "-Dorg.slf4j.simpleLogger.logFile=System.err"]
FETCH_HINT = "run bash scripts/fetch_jvm.sh"


class JvmError(RuntimeError):
    """No java, javac or Kafka jars here, or a compilation failed (the message says)."""


def java() -> str:
    """The java binary: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise JvmError("no java on PATH (Java 17+ is needed for Kafka's jars)")
    return found


def javac() -> str:
    found = shutil.which("javac", path=str(Path(java()).parent)) or shutil.which("javac")
    if found is None:
        raise JvmError("no javac next to java (a JDK, not a JRE, is needed)")
    return found


def jars_present(jar_glob: str = "kafka-clients-*.jar") -> bool:
    return LIB.is_dir() and any(LIB.glob(jar_glob))


def require_jars() -> None:
    if not jars_present():
        raise JvmError(f"Kafka's jars are not in {LIB}: {FETCH_HINT}")


def classpath(*extra: Path) -> str:
    require_jars()
    return os.pathsep.join([*(str(p) for p in extra), str(LIB / "*")])


def compile_java(sources: Path) -> Path:
    """Compile every .java under ``sources`` against Kafka's jars, into a directory named
    after their contents (so a second test, or a second run, reuses it)."""
    require_jars()
    files = sorted(sources.rglob("*.java"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    out = CLASSES / f"{sources.name}-{digest.hexdigest()[:16]}"
    if (out / ".done").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    result = subprocess.run([javac(), "-nowarn", "-d", str(out), "-cp", classpath(),
                             *map(str, files)], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise JvmError(f"javac failed for {sources}:\n{result.stdout}\n{result.stderr}")
    (out / ".done").write_text("")
    return out


def java_command(main_class: str, *args: str, classpath_extra: Sequence[Path] = (),
                 jvm_args: Sequence[str] = ()) -> list[str]:
    """``java -cp ... MAIN ARGS``: Kafka's jars (and ``classpath_extra``) on the
    classpath, a small heap, quiet logging."""
    return [java(), "-Xmx512m", *LOGGING, *jvm_args, "-cp", classpath(*classpath_extra),
            main_class, *args]
