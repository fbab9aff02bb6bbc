"""calls_bench.py's hook into the brokers it starts (on their PYTHONPATH, never installed).

In a process whose command line says ``serve``, with ``BENCH_CALLS_DIR`` set: a cProfile
profiler that SIGUSR1 turns on and off, and SIGUSR2 dumps to
``$BENCH_CALLS_DIR/calls-PID.prof`` (then clears). The bench reads the call counts, which
do not depend on the machine's speed; the profiler's seconds are not used."""

import os

_DIR = os.environ.get("BENCH_CALLS_DIR")
if _DIR:
    with open("/proc/self/cmdline", "rb") as _f:
        _SERVE = b"serve" in _f.read().split(b"\0")
    if _SERVE:
        import cProfile
        import signal

        _profile = cProfile.Profile()
        _on = [False]

        def _toggle(*_: object) -> None:
            if _on[0]:
                _profile.disable()
            else:
                _profile.enable()
            _on[0] = not _on[0]

        def _dump(*_: object) -> None:
            _profile.dump_stats(os.path.join(_DIR, f"calls-{os.getpid()}.prof"))
            _profile.clear()

        signal.signal(signal.SIGUSR1, _toggle)
        signal.signal(signal.SIGUSR2, _dump)
