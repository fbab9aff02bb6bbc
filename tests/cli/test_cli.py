"""The command line as an operator meets it: ``odradek selfcheck`` and ``dump-log``."""

from __future__ import annotations

import subprocess
import sys

from odradek.cli.main import main
from odradek.records import builder, codecs
from odradek.storage import Log


def test_python_dash_m_odradek_selfcheck_passes_on_a_real_directory(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "selfcheck", "--data-dir", str(tmp_path),
         "--records", "3000"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "selfcheck passed" in done.stdout
    assert done.stdout.count("  ok  ") == 4


def test_dump_log_prints_batches_and_records_like_kafka_dump_log(tmp_path, capsys):
    lg = Log.open(str(tmp_path / "t-0"))
    lg.append(builder.build_simple([b"hello", b"world"], keys=[b"k1", None],
                                   codec=codecs.GZIP))
    path = lg.active.log_path
    lg.close()
    assert main(["dump-log", "--records", path]) == 0
    out = capsys.readouterr().out
    assert "baseOffset: 0 lastOffset: 1 count: 2" in out
    assert "compresscodec: gzip" in out
    assert "| offset: 1 CreateTime: 0 key: None payload: world" in out


def test_dump_log_reports_where_a_damaged_file_goes_bad(tmp_path, capsys):
    lg = Log.open(str(tmp_path / "t-0"))
    lg.append(builder.build_simple([b"hello"]))
    path = lg.active.log_path
    lg.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 30)
    assert main(["dump-log", path]) == 1
    assert "invalid data at position" in capsys.readouterr().out


def test_no_command_prints_help_and_fails():
    assert main([]) == 2
