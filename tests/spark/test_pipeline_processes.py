"""The pipeline's streaming job as separate processes, as it runs in production:

- killed with SIGKILL mid-run and restarted from its checkpoint, it still lands every
  activity event in the Parquet table exactly once;
- submitted with spark-submit to a Spark standalone cluster (a master and a worker started
  here from the pip-installed pyspark with spark-class, on 127.0.0.1), it writes the same
  tables as in local mode.

Every process is started in a session of its own and stopped by its process group (the
driver's JVM, the worker's executors) even when the test fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

import odradek
from odradek.devcluster import free_port
from odradek.pipeline import generator as gen
from odradek.testing import running_broker
from tests.spark.pipeline_helpers import (
    SPARK_SOCKET_CONF,
    assert_aggregates_match,
    assert_events_exactly_once,
    pipeline_env,
    stop_group,
)

START_MS = 1_700_000_040_000  # 2023-11-14T22:14:00Z
JOB_TIMEOUT = 360  # seconds for a streaming job process to process a few thousand records
CLUSTER_START_TIMEOUT = 90  # seconds for the master and the worker to be ready


def _stream_argv(bootstrap: str, out: Path, *extra: str) -> list[str]:
    return ["pipeline", "stream", "--bootstrap-server", bootstrap, "--out", str(out), *extra]


def _start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    # In the log's directory: Spark may leave a spark-warehouse directory where it runs.
    with open(log, "ab") as sink:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env=env or pipeline_env(), cwd=log.parent)


def _tail(log: Path, lines: int = 60) -> str:
    """The last lines a process wrote, without Java stack frames."""
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join([line for line in text if not line.lstrip().startswith("at ")][-lines:])


def _committed_batches(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.is_dir() else 0


def test_events_land_exactly_once_across_a_sigkill_of_the_streaming_job(spark, tmp_path):
    with running_broker(**{"num.partitions": 3}) as broker:
        gen.ensure_topics(broker.bootstrap, partitions=3)
        generated = gen.generate(gen.GeneratorConfig(seed=5, users=150, duration_s=240,
                                                     sessions_per_s=1.2, start_ms=START_MS))
        gen.produce(broker.bootstrap, generated)
        out = tmp_path / "out"
        # Small micro-batches, so that the kill lands with most of the topic still unread.
        argv = [sys.executable, "-m", "odradek", *_stream_argv(
            broker.bootstrap, out, "--tables", "events", "--trigger", "500 milliseconds",
            "--max-offsets-per-trigger", "150", "--no-stats-topic")]
        log = tmp_path / "stream.log"
        proc = _start(argv, log)
        try:
            deadline = time.monotonic() + JOB_TIMEOUT
            while _committed_batches(out / "_checkpoints" / "events") < 2:
                assert proc.poll() is None, f"stream exited early:\n{_tail(log)}"
                assert time.monotonic() < deadline, f"no batch committed:\n{_tail(log)}"
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and workers, at once
            proc.wait(30)
        finally:
            stop_group(proc)
        landed = spark.read.parquet(str(out / "events")).count()
        assert 0 < landed < len(generated.activity), "the kill did not land mid-run"

        # Restart from the checkpoint and run until everything is processed (in larger
        # micro-batches: the limit is not part of the checkpoint).
        restart = [*argv[:argv.index("--max-offsets-per-trigger")], "--no-stats-topic",
                   "--until-processed", "--timeout", str(JOB_TIMEOUT)]
        proc = _start(restart, log)
        try:
            code = proc.wait(JOB_TIMEOUT + 60)
        finally:
            stop_group(proc)
        assert code == 0, _tail(log)
    assert_events_exactly_once(spark, out, generated)




def _wait_for(log: Path, text: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + CLUSTER_START_TIMEOUT
    while text not in (log.read_text(errors="replace") if log.exists() else ""):
        assert proc.poll() is None, f"{what} exited with {proc.returncode}:\n{_tail(log)}"
        assert time.monotonic() < deadline, f"{what} not ready:\n{_tail(log)}"
        time.sleep(0.3)


def test_the_streaming_job_runs_unchanged_on_a_standalone_cluster(spark, tmp_path):
    bin_dir = Path(pyspark.__file__).parent / "bin"
    spark_class, spark_submit = str(bin_dir / "spark-class"), str(bin_dir / "spark-submit")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    env = pipeline_env()
    procs: list[subprocess.Popen] = []
    try:
        master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
        master = _start([spark_class, "org.apache.spark.deploy.master.Master",
                         "--host", "127.0.0.1", "--port", str(port),
                         "--webui-port", str(free_port())], master_log, env)
        procs.append(master)
        _wait_for(master_log, "I have been elected leader", master, "the master")
        worker = _start([spark_class, "org.apache.spark.deploy.worker.Worker", url,
                         "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
                         "--webui-port", str(free_port()),
                         "--work-dir", str(tmp_path / "work")], worker_log, env)
        procs.append(worker)
        _wait_for(worker_log, "Successfully registered with master", worker, "the worker")

        with running_broker(**{"num.partitions": 2}) as broker:
            gen.ensure_topics(broker.bootstrap, partitions=2)
            generated = gen.generate(gen.GeneratorConfig(seed=3, users=80, duration_s=120,
                                                         sessions_per_s=0.8,
                                                         start_ms=START_MS))
            gen.produce(broker.bootstrap, generated)
            out = tmp_path / "out"
            entry = str(Path(odradek.__file__).parent / "__main__.py")
            submit_log = tmp_path / "submit.log"
            submit = _start([spark_submit, "--master", url,
                             "--conf", "spark.driver.memory=512m",
                             "--conf", "spark.executor.memory=512m",
                             "--conf", f"spark.pyspark.python={sys.executable}",
                             "--conf", "spark.ui.enabled=false",
                             "--conf", SPARK_SOCKET_CONF,
                             entry, *_stream_argv(broker.bootstrap, out, "--until-processed",
                                                  "--trigger", "1 second",
                                                  "--timeout", str(JOB_TIMEOUT))],
                            submit_log, env)
            procs.append(submit)
            code = submit.wait(JOB_TIMEOUT + 120)
            assert code == 0, _tail(submit_log)
        output = submit_log.read_text(errors="replace")
        assert f"on {url} into" in output  # the driver ran on the cluster's master
        apps = list((tmp_path / "work").glob("app-*"))
        assert apps, "no executor ran on the worker"
        assert_events_exactly_once(spark, out, generated)
        assert_aggregates_match(spark, out, generated)
    finally:
        for proc in reversed(procs):
            stop_group(proc)


@pytest.mark.parametrize("args, message", [
    (["--duration", "0"], "duration must be between"),
    (["--users", "0"], "users must be at least 1"),
])
def test_pipeline_generate_refuses_bad_settings(args, message, tmp_path):
    done = subprocess.run([sys.executable, "-m", "odradek", "pipeline", "generate",
                           "--bootstrap-server", "127.0.0.1:1", *args],
                          capture_output=True, text=True, timeout=120, env=pipeline_env())
    assert done.returncode == 1
    assert message in done.stderr
