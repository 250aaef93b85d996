"""A zygote for test clusters: one process that has imported every node module forks each node.

Where a test cluster's start-up goes (bench/testing_overhead.py --start-only): a node process
spends 0.5 s (controller) to 1.5 s (broker, combined node) of CPU importing its modules before it
opens a socket, and six of them share two cores. A zygote pays the imports once per test process,
in the background from the plugin's start, and each node is then a fork of it, running
`tidelog <role> --config <server.properties>` as its own process would:

    zygote = Zygote.shared()          # started once; the imports happen in it, not here
    node = zygote.spawn(spec)         # a ForkedNode: a NodeProcess whose pid is the fork's

A forked node runs in its own session with its stdout/stderr appended to its node.log, exactly as
`NodeProcess.spawn` starts one, and its command line reads as a spawned node's
(`python -m tidelog <role> --config <server.properties>`, written over the zygote's own, which
leaves ARGV_ROOM bytes for it), and with the test process's environment of the moment (a test
that sets a variable for its nodes, as a fail point, before it starts them: a spawned node
inherits it, so the fork is given it), so that `tidelog down`, `LocalCluster.attach` and a later
`LocalCluster.start` of the same data dir recognise it by its config file as they do a spawned
one; what differs is its parent (the zygote, which reaps it). PR_SET_PDEATHSIG ends every forked node when the zygote ends, and
the zygote ends when its stdin closes: the test process holds the only write end, so however the
test process ends, its zygote's nodes end with it (as reaper's watchdog does for spawned ones).
A node that a fault restarts (chaos.nemesis) is forked again: `LocalCluster.spawn` starts it as
`start` started the rest. A cluster kept by --tidelog-reuse is never forked: it must outlive the
run.

Test-only: `Cluster(fast_start=True)`, which the pytest plugin passes, the integration
tests' clusters (`fork_or_spawn` as `LocalCluster.start(spawn=...)`) and the chaos tests' scenario
runs (tests/chaos/scenario_runs.py passes it to the chaos engine); `tidelog up` and the CLI's
`tidelog chaos run` spawn each node as its own fresh process. The zygote forks only from its main thread, before any node code
ran in it, and each child reseeds `random` (Python does so at fork) so that forked controllers
draw different election timeouts.
"""

from __future__ import annotations

import ctypes
import gc
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from common.limits import KILL_WAIT
from common.units import SECONDS

if TYPE_CHECKING:
    from localcluster.cluster_layout import NodeSpec

from localcluster.node_process import NodeProcess, node_environment

ZYGOTE_READY_TIMEOUT: Final = 60 * SECONDS  # its imports, on a loaded 2-core machine
EXIT_LINE_SEARCH_BYTES: Final = 64 * 1024  # the zygote's exit line is the log's last
PR_SET_PDEATHSIG: Final = 1
PR_SET_NAME: Final = 15
# the room a forked node's command line has: the zygote starts with an argument of this many
# spaces, whose bytes the fork overwrites (a longer command line is spawned the ordinary way)
ARGV_ROOM: Final = 2048  # bytes
# /proc/<pid>/stat fields 48 and 49 (man 5 proc): where the command line lies in the process's
# memory; counted here from field 3, the first after "(comm)"
STAT_ARG_START: Final = 48 - 3
STAT_ARG_END: Final = 49 - 3
STAT_START_TIME: Final = 22 - 3  # when the process started (clock ticks after boot): who holds a pid
# what a node imports by the time it serves: its command's modules, what they import lazily (the
# request handlers, the controller's routes, aiohttp's server, pysyncobj's cipher), and every
# module of the packages listed in WARM_PACKAGES
NODE_MODULES: Final = ("tidelog.cli", "quorum.node", "broker.node", "tidelog.combined_node", "broker.request_handler",
                       "quorum.controller_server", "aiohttp.web", "pysyncobj.encryptor", "cryptography.fernet",
                       "broker.group_coordinator.offsets_topic", "broker.transaction_coordinator.state_topic",
                       "broker.transaction_coordinator.markers", "broker.log.legacy_offsets", "groups.offset_reset",
                       "common.preflight", "common.transaction_admin", "metadata.reassignment",
                       "security.scram_image", "stringprep")
WARM_PACKAGES: Final = ("quorum", "broker.handlers")

log = logging.getLogger(__name__)


class ZygoteError(RuntimeError):
    """The zygote could not start or fork; the caller spawns its nodes the ordinary way."""


class ForkedNode(NodeProcess):
    """A node forked by the zygote: alive while its pid exists (the zygote reaps it once it has
    written its exit status to the node's log, which is where its exit status is read from: the
    test process is not its parent) and is still the process forked then, by its start time. A pid
    alone is not: pid_max is 32,768 on the test machine, /proc/<n> resolves a thread id n of any
    process too, and send() would signal whoever holds the number after a wrap."""

    def __init__(self, spec: NodeSpec, pid: int, started: int | None = None) -> None:
        super().__init__(spec, pid)
        self.started = start_time(pid) if started is None else started  # None: gone already

    def running(self) -> bool:
        return self.pid is not None and self.started is not None and start_time(self.pid) == self.started

    @property
    def exit_status(self) -> int | None:
        """As Popen.returncode (negative: killed by that signal), from the zygote's line in the log."""
        if self.pid is None or self.running():
            return None
        try:
            with open(self.spec.log_path, "rb") as log_file:
                log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - EXIT_LINE_SEARCH_BYTES))
                tail = log_file.read().decode(errors="replace")
        except OSError:
            return None
        found = re.findall(rf"\(pid {self.pid}\) exited with status (-?\d+)", tail)
        return int(found[-1]) if found else None


class Zygote:
    """The test process's side: one zygote process, asked over its stdin, answering on its stdout."""

    _shared: Zygote | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        env = node_environment()
        self._lock = threading.Lock()
        self._argv = [sys.executable, "-P", __file__, " " * ARGV_ROOM]
        self._popen = subprocess.Popen(self._argv, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                       start_new_session=True)
        self._ready = False

    @classmethod
    def shared(cls) -> Zygote:
        """This process's zygote, started on first use (the plugin starts it early)."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared._popen.poll() is not None:
                cls._shared = cls()
            return cls._shared

    def _ask(self, request: dict[str, str]) -> dict[str, object]:
        assert self._popen.stdin is not None and self._popen.stdout is not None, "pipes asked for"
        with self._lock:
            try:
                self._popen.stdin.write((json.dumps(request) + "\n").encode())
                self._popen.stdin.flush()
                line = _readline_within(self._popen.stdout, ZYGOTE_READY_TIMEOUT)
            except OSError as exc:
                raise ZygoteError(f"the zygote (pid {self._popen.pid}) is gone: {exc}") from None
        if not line:
            raise ZygoteError(f"the zygote (pid {self._popen.pid}) answered nothing (exit status "
                              f"{self._popen.poll()})")
        answer: dict[str, object] = json.loads(line)
        if "error" in answer:
            raise ZygoteError(str(answer["error"]))
        return answer

    def ping(self) -> None:
        """Return once the zygote has imported everything and answers."""
        self._ask({"ping": "1"})

    def spawn(self, spec: NodeSpec) -> ForkedNode:
        """Fork `tidelog <role> --config <properties>` for `spec`, logging to its node.log."""
        needed = len(_argv_bytes(node_command(spec.role, str(spec.properties_path))))
        if needed > len(_argv_bytes(self._argv)):
            raise ZygoteError(f"the command line of {spec.label} ({needed} bytes) does not fit in the "
                              f"zygote's ({len(_argv_bytes(self._argv))} bytes)")
        with open(spec.log_path, "ab") as out:  # NodeProcess.spawn's line (tests find restarts by it)
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} tidelog launcher: starting "
                      f"{' '.join(node_command(spec.role, str(spec.properties_path)))} "
                      f"(forked by the tidelog test zygote, pid {self._popen.pid})\n".encode())
        answer = self._ask({"role": spec.role, "config": str(spec.properties_path), "log": str(spec.log_path),
                            "cwd": str(spec.directory), "env": json.dumps(node_environment())})
        pid, started = answer["pid"], answer["started"]
        assert isinstance(pid, int) and isinstance(started, int), "the zygote answers a pid and its start"
        return ForkedNode(spec, pid, started)

    def close(self) -> None:
        """EOF to the zygote: it exits, and every node it forked gets SIGKILL (PR_SET_PDEATHSIG)."""
        if self._popen.stdin is not None and not self._popen.stdin.closed:
            self._popen.stdin.close()
        try:
            self._popen.wait(KILL_WAIT)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait(KILL_WAIT)


def fork_or_spawn(spec: NodeSpec) -> NodeProcess:
    """The node forked from this process's zygote; spawned as `tidelog up` does if the zygote
    cannot fork it (the node starts either way, only slower)."""
    try:
        return Zygote.shared().spawn(spec)
    except ZygoteError as exc:
        log.warning("the test zygote could not fork %s (%s); spawning it instead", spec.label, exc)
        return NodeProcess.spawn(spec)


def node_command(role: str, config: str) -> list[str]:
    """The command line a forked node shows: the one `NodeProcess.spawn` runs."""
    return [sys.executable, "-m", "tidelog", role, "--config", config]


def start_time(pid: int) -> int | None:
    """When process `pid` started (/proc/<pid>/stat); None once it is reaped."""
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[STAT_START_TIME])
    except (OSError, IndexError, ValueError):
        return None


def _argv_bytes(argv: list[str]) -> bytes:
    """argv as the kernel keeps it: each argument NUL-terminated."""
    return b"".join(os.fsencode(arg) + b"\0" for arg in argv)


def _readline_within(stream: IO[bytes], timeout: float) -> bytes:
    """One line from `stream`, or b"" once `timeout` passed (the zygote hung or died)."""
    deadline = time.monotonic() + timeout
    while True:  # bounded by the deadline
        left = deadline - time.monotonic()
        if left <= 0:
            return b""
        readable, _, _ = select.select([stream], [], [], left)
        if readable:
            return stream.readline()


# --- the zygote's side ------------------------------------------------------------------------


def _child(role: str, config: str, log_path: str, cwd: str, env: dict[str, str], zygote_pid: int) -> None:
    """In the fork: become the node process `NodeProcess.spawn` would have started; never returns."""
    code = 1
    try:
        os.setsid()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote_pid:  # the zygote died before the line above: no one to end us
            os._exit(1)
        libc.prctl(PR_SET_NAME, f"tidelog-{role[:1]}{Path(cwd).name.rpartition('-')[2]}".encode()[:15])
        _write_command_line(node_command(role, config))
        # the dispositions a fresh interpreter starts with: SIGPIPE stays ignored, as Python sets it
        # (a write to a closed socket is an EPIPE error, not a death: -13 when it was SIG_DFL)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(devnull)
        os.chdir(cwd)
        os.environ.clear()  # read at run time (fail points, the log level), not at import
        os.environ.update(env)
        from tidelog import cli

        sys.argv = ["tidelog", role, "--config", config]
        code = cli.main([role, "--config", config])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # the node's own crash: its log gets the traceback, as a process's stderr would
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _write_command_line(argv: list[str]) -> None:
    """Show `argv` as this process's /proc/<pid>/cmdline: written over the zygote's own argument
    bytes (as setproctitle(3) does), NUL-padded to their end; the parent checked that it fits."""
    fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    start, end = int(fields[STAT_ARG_START]), int(fields[STAT_ARG_END])
    text = _argv_bytes(argv)
    if len(text) <= end - start:  # else: the zygote's command line stays, as before
        ctypes.memmove(start, text.ljust(end - start, b"\0"), end - start)


_children: dict[int, tuple[str, str]] = {}  # pid -> (role, node.log) of the nodes not reaped yet


def _reap_exited() -> None:
    """Every exited child: its exit status appended to its log (what ForkedNode.exit_status reads),
    and only then reaped, so that its pid exists until the status can be read.

    Called by the main loop only. It ran as the SIGCHLD handler once, and a Python handler runs again
    inside itself when a signal arrives between two of its bytecodes: the inner call reaped the child
    the outer one was writing the line of, whose own waitpid then raised ECHILD out of main(), and the
    zygote died, its nodes' exit statuses unwritten (in 4 of 8 bursts of 12 nodes SIGKILLed up to
    0.2 ms apart; pid 1 reaped the orphans 1.1-1.7 s later)."""
    while True:  # bounded by the exited children
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None:
            return
        code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        role, log_path = _children.pop(info.si_pid, ("node", ""))
        if log_path:
            try:
                with open(log_path, "a") as log_file:
                    log_file.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} tidelog test zygote: {role} "
                                   f"(pid {info.si_pid}) exited with status {code}\n")
            except OSError:
                pass  # its directory is gone: nobody will read it
        os.waitpid(info.si_pid, 0)  # only this loop reaps: it is still ours to reap


def warm() -> None:
    """Import what a node would, and load the message classes its broker preloads before its heap
    freeze (broker.startup_heap), so that a fork finds them loaded."""
    import importlib
    import pkgutil

    def load(module: str) -> None:
        # a module that does not import is left to the fork that needs it: its node then fails
        # with the traceback in its log, as a spawned one would; the other nodes still start
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - see above
            traceback.print_exc()

    for module in NODE_MODULES:  # the point of the zygote: imported once, shared by every fork
        load(module)
    for package in WARM_PACKAGES:
        try:
            path = importlib.import_module(package).__path__
        except Exception:  # noqa: BLE001 - as load()
            continue
        for found in pkgutil.iter_modules(path, prefix=f"{package}."):
            if not found.name.endswith("__main__"):
                load(found.name)
    try:
        from common.protocol import messages
        from common.protocol.api_keys import SUPPORTED_VERSIONS

        messages.preload({api: (high, high) for api, (_, high) in SUPPORTED_VERSIONS.items()})
    except Exception:  # noqa: BLE001 - the broker preloads them itself then
        traceback.print_exc()
    # what every fork shares, out of the cyclic GC's sight before the fork: a node's own
    # freeze_startup_heap then collects only what it allocated (0.75 s of GIL at load 27 without
    # this), and the shared pages are not written to by collections (copy-on-write kept)
    gc.collect()
    gc.freeze()


def main() -> int:
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]  # as tidelog.cli does for nodes
    warm()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only EOF ends it
    # SIGCHLD wakes the loop below through a pipe, written by the interpreter's C-level handler in
    # whichever thread the kernel gave the signal to (numpy's OpenBLAS starts one here). A Python
    # handler runs only between this thread's bytecodes: its flag, set in the other thread just
    # after this one last looked and before it blocked in read(), waited for the next request, the
    # exited child meanwhile a zombie that the test process counts as running
    wakeup, wakeup_write = os.pipe()
    for fd in (wakeup, wakeup_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)  # a full pipe still wakes us
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)  # the wake-up is all it is for
    me, stdin, pending = os.getpid(), sys.stdin.fileno(), b""
    while True:  # bounded by the test process's life: EOF when it ends
        readable, _, _ = select.select([stdin, wakeup], [], [])
        if wakeup in readable:
            while _read_some(wakeup):  # bounded by the pipe's contents
                pass
            _reap_exited()
        if stdin in readable:
            data = os.read(stdin, 64 * 1024)
            if not data:
                return 0
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:  # bounded by what was read
                sys.stdout.write(json.dumps(_answer(line, me, (wakeup, wakeup_write))) + "\n")
                sys.stdout.flush()


def _read_some(fd: int) -> bytes:
    """What a non-blocking pipe holds (up to 4 KiB); b"" once it is empty."""
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


def _answer(line: bytes, me: int, wakeup_fds: tuple[int, int]) -> dict[str, object]:
    """One request's answer: a pong, a forked node's pid, or the error."""
    try:
        request = json.loads(line)
        if "ping" in request:
            return {"pong": me}
        role, config, log_path, cwd = (str(request[k]) for k in ("role", "config", "log", "cwd"))
        env = {str(k): str(v) for k, v in json.loads(request["env"]).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return {"error": f"bad request {line[:200]!r}: {exc}"}
    # no SIGCHLD mask around the fork: a child is reaped by the main loop only, after its entry below
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        for fd in wakeup_fds:
            os.close(fd)
        _child(role, config, log_path, cwd, env, me)
    _children[pid] = (role, log_path)
    return {"pid": pid, "started": start_time(pid)}  # not reaped before the main loop: it is there


if __name__ == "__main__":
    sys.exit(main())
