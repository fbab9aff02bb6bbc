"""The fuzz tier's coverage-guided part in CI: each atheris target (tests/fuzz/
atheris_targets.py: request decoders, framing, record batches, codecs, SASL, and what
a broker reads from other brokers: Fetch answers, a follower's appends, znodes) runs for
``ATHERIS_RUNS`` inputs (default 3,000: a few seconds each), seeded from the recorded
corpus, in a process of its own (atheris instruments modules as they are first imported,
and a finding ends the process). A finding fails the test with libFuzzer's report and the
input that caused it, kept in the test's temporary directory.

Long runs are by hand (docs/operations.md, "Robustness"): ``-max_total_time=3600``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

# atheris_targets.TARGETS' names. Not imported from there: that module instruments the
# decoders as it imports them, which must happen in the fuzzing process, not in pytest's.
TARGETS = ("codecs", "decode_batch", "decode_fetch", "decode_produce", "decode_request",
           "fetch_response", "follower_batches", "framing", "record_batches", "sasl", "znodes")
ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("ATHERIS_RUNS", "3000"))


@pytest.mark.parametrize("target", TARGETS)
def test_decoder_refuses_fuzzed_bytes_only_with_its_own_errors(target: str,
                                                               tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    result = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.atheris_targets", target, f"-atheris_runs={RUNS}",
         "-timeout=10", "-rss_limit_mb=1024", "-seed=21", f"-artifact_prefix={tmp_path}/",
         str(corpus)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    found = [p.name for p in tmp_path.iterdir() if p.name != "corpus"]
    assert result.returncode == 0 and not found, (
        f"atheris target {target} found {found}:\n{result.stderr[-4000:]}")


def test_every_atheris_target_runs_in_ci() -> None:
    source = (ROOT / "tests" / "fuzz" / "atheris_targets.py").read_text()
    assert set(re.findall(r'^    "(\w+)": Target\(', source, re.MULTILINE)) == set(TARGETS)
