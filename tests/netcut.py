"""Network partitions between processes that all listen on 127.0.0.1: one cgroup (v2)
per process and iptables rules matching on it.

Every broker and ZooKeeper of the fault tier listens on 127.0.0.1, each on its own port,
so a cut has to be drawn per process, not per address. A socket belongs to the cgroup its
process was in when it created the socket, and iptables' ``cgroup`` match (xt_cgroup,
``--path``) selects the packets a socket of that group sends. So each process to be cut
off is put in a group of its own *at birth*, before it can open any socket, by starting it
through a prefix::

    sh -c 'echo $$ > <group>/cgroup.procs && exec "$@"' sh <argv...>

(the shell moves itself into the group, then becomes the program: same pid), and a cut
of process A from port P is one rule::

    iptables -I OUTPUT -m cgroup --path <A's group> -p tcp --dport P \\
             -m comment --comment <tag> -j DROP

It drops A's connection attempts to P and, on connections A already has to P, every
segment A sends (so they stall and time out as on a real partition). A cut between two
brokers is two rules (A to B's port, B to A's port); a cut from ZooKeeper is one (A to
ZooKeeper's port). Other processes (the test's clients, the other brokers) are not
matched: they still reach A, and A still answers them.

``NetworkCuts`` owns a cgroup directory of its own (a unique name under the cgroup2
mount) and every rule it adds (each tagged with its unique comment). Leaving its ``with``
block removes exactly those rules (by spec, then any left with its tag) and its groups. It
kills nothing: processes are ended by whoever started them; a group is removed once it
is empty (retrying briefly: the kernel drops an exited process from its group a moment
after the exit), else left behind with a warning.

Needs root, a cgroup2 mount, iptables and the cgroup match. ``network_cuts()`` checks all
of them (down to a probe process whose connection must be dropped while another port
still answers it) and skips the test with the reason, or fails it when ``CI`` is set
(scripts/test.sh installs iptables).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

import pytest

CHAIN = "OUTPUT"
IPTABLES_TIMEOUT_S = 15.0
RMDIR_RETRY_S = 3.0


class NetworkCutsUnavailable(RuntimeError):
    """This machine cannot cut processes off each other (the reason is the message)."""


def cgroup2_mount() -> tuple[Path, str] | None:
    """Where the cgroup v2 hierarchy is mounted, and which of its directories that mount
    shows (its root within the hierarchy, "/" unless a subtree is mounted): from
    /proc/self/mountinfo, the first cgroup2 mount. None without one."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        before, _, after = line.partition(" - ")
        fields = before.split()
        if after.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return Path(_unescape(fields[4])), _unescape(fields[3])
    return None


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def _iptables() -> str | None:
    found = shutil.which("iptables")
    if found:
        return found
    for candidate in ("/usr/sbin/iptables", "/sbin/iptables"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


class NetworkCuts:
    """Cgroups for processes to be cut off, and the iptables rules that cut them.

    Use as a context manager; ``__enter__`` checks the machine can do it (raises
    ``NetworkCutsUnavailable`` otherwise) and ``__exit__`` removes every rule and group
    it made.

    - ``group_for(name)``: the group for process ``name`` (created on first use), as the
      cgroup path iptables' ``--path`` takes;
    - ``prefix(name)``: the argv prefix that starts a program in that group;
    - ``cut(group, port)`` / ``heal(group, port)``: drop, or again let through, what the
      group's processes send to TCP ``port`` on this host; ``heal_all()``.
    """

    def __init__(self, *, probe: bool = True) -> None:
        self.tag = f"odradek-netcut-{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.probe = probe
        self._iptables: str | None = None
        self._mount: Path | None = None  # the cgroup2 mount point
        self._hierarchy_root = "/"  # the directory of the hierarchy the mount shows
        self._groups: dict[str, str] = {}  # name -> cgroup path (for --path)
        self._rules: list[tuple[str, int]] = []  # (group, port), in order added
        self._entered = False

    # --- setup and teardown -------------------------------------------------------------

    def __enter__(self) -> NetworkCuts:
        self._entered = True
        try:
            self._check()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check(self) -> None:
        if sys.platform != "linux":
            raise NetworkCutsUnavailable(f"network cuts need Linux (this is {sys.platform})")
        if os.geteuid() != 0:
            raise NetworkCutsUnavailable(
                "network cuts need root (to create cgroups and add iptables rules)")
        mount = cgroup2_mount()
        if mount is None:
            raise NetworkCutsUnavailable("network cuts need a cgroup v2 mount (none in "
                                         "/proc/self/mountinfo)")
        self._mount, self._hierarchy_root = mount
        self._iptables = _iptables()
        if self._iptables is None:
            raise NetworkCutsUnavailable(
                "network cuts need iptables (`apt-get install iptables`; scripts/test.sh "
                "installs it)")
        try:
            self._root_dir.mkdir()
        except OSError as exc:
            raise NetworkCutsUnavailable(
                f"cannot create a cgroup under the cgroup2 mount {self._mount}: {exc}") from exc
        if self.probe:
            self._probe()

    def _probe(self) -> None:
        """A process in a group of its own, cut from one listening port, must still
        connect to another and time out on the cut one: the cgroup match exists, finds
        the group, and sees its sockets."""
        group = self.group_for("probe")
        with socket.create_server(("127.0.0.1", 0)) as open_, \
                socket.create_server(("127.0.0.1", 0)) as closed:
            open_port, closed_port = open_.getsockname()[1], closed.getsockname()[1]
            try:
                self.cut(group, closed_port)
            except subprocess.CalledProcessError as exc:
                raise NetworkCutsUnavailable(
                    "iptables refused a cgroup-match rule (is xt_cgroup, the `cgroup` "
                    f"match, missing?): {exc.stderr.strip() or exc}") from exc
            code = (
                "import socket, sys\n"
                "socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()\n"
                "try:\n"
                "    socket.create_connection(('127.0.0.1', int(sys.argv[2])), 0.5).close()\n"
                "except OSError:\n"
                "    sys.exit(0)\n"
                "sys.exit(3)\n")
            try:
                done = subprocess.run([*self.prefix("probe"), sys.executable, "-c", code,
                                       str(open_port), str(closed_port)],
                                      capture_output=True, text=True, timeout=20)
            finally:
                self.heal(group, closed_port)
        if done.returncode == 3:
            raise NetworkCutsUnavailable(
                "the iptables cgroup match dropped nothing: a process in cgroup "
                f"{group} still connected to a port cut for it")
        if done.returncode != 0:
            raise NetworkCutsUnavailable(
                f"the network-cut probe failed (exit code {done.returncode}): "
                f"{done.stderr.strip()[-2000:]}")

    def close(self) -> None:
        """Remove every rule added (and any other with this tag), then the groups."""
        if not self._entered:
            return
        self._entered = False
        problems: list[str] = []
        with contextlib.suppress(Exception):
            self.heal_all()
        try:
            self._sweep_rules()
        except Exception as exc:  # reported, and the groups still go
            problems.append(f"could not list/remove iptables rules tagged {self.tag}: {exc}")
        if self._mount is not None:
            for name in list(self._groups):
                problems += self._remove_dir(self._group_dir(name))
            if self._root_dir.exists():
                problems += self._remove_dir(self._root_dir)
        if problems:
            warnings.warn("NetworkCuts cleanup: " + "; ".join(problems), ResourceWarning,
                          stacklevel=2)

    def _sweep_rules(self) -> None:
        """Delete any rule in the chain carrying this tag (one a failed -D missed)."""
        if self._iptables is None:
            return
        listing = self._run(["-S", CHAIN], check=True).stdout
        for line in listing.splitlines():
            words = shlex.split(line)
            if words[:2] == ["-A", CHAIN] and self.tag in words:
                self._run(["-D", CHAIN, *words[2:]], check=False)

    @staticmethod
    def _remove_dir(directory: Path) -> list[str]:
        """rmdir a cgroup once it is empty, retrying briefly; never kills anything."""
        deadline = time.monotonic() + RMDIR_RETRY_S
        while True:
            try:
                directory.rmdir()
                return []
            except FileNotFoundError:
                return []
            except OSError as exc:
                if time.monotonic() > deadline:
                    procs = ""
                    with contextlib.suppress(OSError):
                        procs = (directory / "cgroup.procs").read_text().split()
                    return [f"cgroup {directory} left behind ({exc}; processes: "
                            f"{' '.join(procs) or 'none'})"]
                time.sleep(0.05)

    # --- groups ---------------------------------------------------------------------------

    @property
    def _root_dir(self) -> Path:
        assert self._mount is not None
        return self._mount / self.tag

    def _group_dir(self, name: str) -> Path:
        return self._root_dir / name

    def group_for(self, name: str) -> str:
        """The cgroup of process ``name`` (created on first use), as a path in the
        cgroup2 hierarchy: what ``iptables -m cgroup --path`` takes, and ``cut`` and
        ``heal``."""
        if not self._entered or self._mount is None:
            raise RuntimeError("NetworkCuts: use it inside its `with` block")
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"not a group name: {name!r}")
        group = self._groups.get(name)
        if group is None:
            self._group_dir(name).mkdir(exist_ok=True)
            group = "/".join(p for p in (*self._hierarchy_root.split("/"), self.tag, name)
                             if p)
            self._groups[name] = group
        return group

    def directory(self, name: str) -> Path:
        """The cgroupfs directory of ``name``'s group (its cgroup.procs lists who is in)."""
        self.group_for(name)
        return self._group_dir(name)

    def prefix(self, name: str) -> list[str]:
        """An argv prefix that starts a program in ``name``'s group before it runs: the
        shell puts itself in the group and execs the program (same pid, same signals)."""
        procs = self.directory(name) / "cgroup.procs"
        script = f'echo $$ > {shlex.quote(str(procs))} && exec "$@"'
        return ["/bin/sh", "-c", script, "sh"]

    # --- rules ------------------------------------------------------------------------------

    def _spec(self, group: str, port: int) -> list[str]:
        return ["-m", "cgroup", "--path", group, "-p", "tcp", "--dport", str(port),
                "-m", "comment", "--comment", self.tag, "-j", "DROP"]

    def _run(self, args: Sequence[str], *, check: bool) -> subprocess.CompletedProcess[str]:
        assert self._iptables is not None
        return subprocess.run([self._iptables, "-w", *args], capture_output=True, text=True,
                              timeout=IPTABLES_TIMEOUT_S, check=check)

    def cut(self, group: str, port: int) -> None:
        """Drop every TCP segment a process of ``group`` sends to ``port`` (on any local
        address). Idempotent. Inserted first in the chain, ahead of any ACCEPT."""
        if group not in self._groups.values():
            raise ValueError(f"{group} is not a group of these NetworkCuts")
        if (group, port) in self._rules:
            return
        self._run(["-I", CHAIN, *self._spec(group, port)], check=True)
        self._rules.append((group, port))

    def heal(self, group: str, port: int) -> None:
        """Remove the cut of ``group`` from ``port``, if there is one."""
        if (group, port) not in self._rules:
            return
        self._run(["-D", CHAIN, *self._spec(group, port)], check=True)
        self._rules.remove((group, port))

    def heal_all(self) -> None:
        for group, port in list(reversed(self._rules)):
            self.heal(group, port)

    @property
    def rules(self) -> list[tuple[str, int]]:
        """The cuts in place, (group, port)."""
        return list(self._rules)


@contextlib.contextmanager
def network_cuts() -> Iterator[NetworkCuts]:
    """A ``NetworkCuts`` for a test; where this machine cannot cut, the test skips with
    the reason (fails, when ``CI`` is set)."""
    try:
        cuts = NetworkCuts().__enter__()
    except NetworkCutsUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"network cuts unavailable: {exc}", pytrace=False)
        pytest.skip(f"network cuts unavailable: {exc}")
    try:
        yield cuts
    finally:
        cuts.close()
