"""A build's chapter processes, forked from one warm process instead of started afresh.

A chapter runs in two processes: a worker (papermill, ``execute._execute_one``) and its kernel
(ipykernel). Started afresh, each is a new interpreter importing the same libraries (jupytext,
papermill, ipykernel, IPython, numpy, pydantic, altair, the scaletax modules): about 1.5 CPU
seconds and a second of latency per chapter, paid again for every chapter of every build.

Here the runner starts one :class:`Server` per build, in the environment a kernel gets
(``execute.kernel_env`` with ``PYTHONHASHSEED=0``). The server imports :data:`PRELOAD` once and
then forks a worker per chapter on request (:meth:`Server.spawn`). The worker forks the
chapter's kernel from itself as it starts, before papermill opens an event loop or a socket
(:func:`plant_seed`): the seed waits until papermill's kernel manager has written the
connection file and hands it over (:class:`SeededKernelManager`), then runs ipykernel as
``python -m ipykernel_launcher`` would. What differs from a fresh process is only that the
modules are already imported:

- the environment is the one a fresh process gets (the server starts with the kernel's; the
  worker adds its chapter's variables, and the seed takes the environment papermill hands the
  kernel), so is the hash seed (``PYTHONHASHSEED=0`` at the server's start), the working
  directory, ``sys.argv`` and ``sys.path``;
- a child is single-threaded (the server checks, before each fork, that it has one thread, so
  no lock or event loop is inherited mid-flight) and gets default signal handlers;
- it is a session of its own and gets SIGKILL when its parent dies (the server dies with the
  runner, the worker with the server, the kernel with the worker), as the processes started
  with ``lifecycle.die_with_parent`` do; the server kills what is left when the runner closes it;
- the preload reads no data: the server checks that it read no GPU of the catalog, so each
  chapter's record of reads (``hardware.reads``) starts empty as in a fresh process.

Where the server cannot start, the runner starts each worker as a new process as before.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from scaletax.report import lifecycle

#: Modules the server imports before it forks anything: what a worker and a chapter's kernel
#: import (the notebooks' imports, the libraries they load, papermill and ipykernel).
PRELOAD = (
    "numpy", "yaml", "pydantic", "jupytext", "nbformat", "papermill", "nbclient", "jupyter_client",
    "ipykernel.kernelapp", "ipykernel_launcher", "ipykernel.ipkernel",
    "ipykernel.debugger",  # debugpy: every kernel imports it as it starts (0.2-0.5 CPU s each)
    "IPython", "altair", "vl_convert", "myst_nb",
    "scaletax.report.execute", "scaletax.report.chapters", "scaletax.report.scenario",
    "scaletax.render.charts", "scaletax.render.tables", "scaletax.chapters.hardware",
    "scaletax.chapters.memory", "scaletax.chapters.communication", "scaletax.chapters.precision",
    "scaletax.chapters.validation", "scaletax.chapters.decision", "scaletax.chapters.summary",
    "scaletax.model.precision_kernels",
)
#: Seconds the runner waits for the server to import :data:`PRELOAD` and say it is ready.
READY_TIMEOUT_S = 120.0
_READY = "ready"


class Unavailable(RuntimeError):
    """The server could not start (the runner then starts workers as new processes)."""


def _threads() -> int:
    """Threads of this process (the kernel's count; Python's where /proc is missing)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


# --------------------------------------------------------------------------------------------
# The runner's end
# --------------------------------------------------------------------------------------------

class Child:
    """A process the server forked: the parts of ``subprocess.Popen`` the runner uses."""

    def __init__(self, server: "Server", pid: int):
        self._server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._server._drain(block=False)
            self.returncode = self._server._exits.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self._server._drain(block=True, timeout=0.1 if left is None else min(left, 0.1))
        return self.returncode


class Server:
    """The runner's handle on one prefork server (one per build). Raises :class:`Unavailable`
    when it does not come up."""

    def __init__(self, env: dict[str, str], log: Path, cwd: Path | None = None):
        self._exits: dict[int, int] = {}
        self._pids: dict[int, int] = {}
        self._buf = b""
        self._next = 0
        self._log = open(log, "w", encoding="utf-8")
        try:
            with lifecycle.Interrupts.deferred():  # an interrupt during the fork: once proc is set
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "scaletax.report.prefork"], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=self._log, env={**env, "PYTHONHASHSEED": "0"}, cwd=cwd,
                    start_new_session=True, preexec_fn=lifecycle.die_with_parent())
        except OSError as exc:
            self._log.close()
            raise Unavailable(str(exc)) from None
        os.set_blocking(self.proc.stdout.fileno(), False)
        line = self._line(READY_TIMEOUT_S)
        if line != {_READY: True}:
            self.close()
            raise Unavailable(f"prefork server did not start ({line!r}); see {log}")

    def _drain(self, block: bool, timeout: float = 0.0) -> list[dict]:
        """Read the server's complete lines (waiting up to ``timeout`` when ``block``); record
        the exits they report and return the other messages."""
        fd = self.proc.stdout.fileno()
        if block:
            select.select([fd], [], [], timeout)
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:  # the server is gone: whatever it had not reported has died with it
                for pid in self._pids.values():
                    self._exits.setdefault(pid, -signal.SIGKILL)
                break
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        out = []
        for raw in lines:
            msg = json.loads(raw)
            if "exit" in msg:
                self._exits[msg["pid"]] = msg["exit"]
            else:
                out.append(msg)
        return out

    def _line(self, timeout: float) -> dict | None:
        """The next message that is not an exit, or None (timeout, or the server died)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self._drain(block=True, timeout=min(0.1, max(0.0, end - time.monotonic())))
            if got:
                return got[0]
            if self.proc.poll() is not None:
                self._drain(block=False)
                return None
        return None

    def spawn(self, target: str, args: list[str], log: Path) -> Child:
        """Fork a process that runs ``target`` (``module:function``) with ``args`` (strings) and
        exits with what it returns; its stdout and stderr go to ``log``."""
        self._next += 1
        req = {"id": self._next, "target": target, "args": [str(a) for a in args], "log": str(log)}
        try:
            self.proc.stdin.write(json.dumps(req).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise Unavailable(f"prefork server is gone: {exc}") from None
        msg = self._line(READY_TIMEOUT_S)
        if not msg or msg.get("id") != self._next or "pid" not in msg:
            raise Unavailable(f"prefork server did not fork ({msg!r})")
        self._pids[self._next] = msg["pid"]
        return Child(self, msg["pid"])

    def close(self) -> None:
        """End the server: it kills the process groups of the children still running."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self._log.close()


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------

#: The server's end of the pipe to the runner (its stdout at start; fd 1 then goes to the log,
#: so that nothing a preloaded module prints can reach the runner as a message).
_PROTO = 1


def _write(msg: dict) -> None:
    os.write(_PROTO, json.dumps(msg).encode() + b"\n")


def _default_signals() -> None:
    """What a fresh interpreter has: Python's SIGINT handler, the rest at their defaults."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)


def _redirect_output(log: str) -> None:
    """stdin from /dev/null, stdout and stderr into ``log`` (truncated)."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)


def _run_and_exit(body) -> None:
    """In a forked child: ``body()``'s return value (or its SystemExit code) is the exit status;
    any other exception is status 1 with its traceback on stderr. Never returns into the code the
    fork was called from."""
    code = 1
    try:
        code = int(body() or 0)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _child(req: dict, die_with_server, keep_closed: tuple[int, ...]) -> int:
    """In the forked child: become what ``python -c target(*args)`` would be and run it."""
    os.setsid()
    die_with_server()
    _default_signals()
    for fd in keep_closed:
        with contextlib.suppress(OSError):
            os.close(fd)
    _redirect_output(req["log"])
    module, func = req["target"].split(":")
    return getattr(importlib.import_module(module), func)(*req["args"])


def serve() -> int:
    """The server's main loop: preload, say ready, fork on each request line, report exits;
    at end of input kill the children still running and exit."""
    global _PROTO
    from scaletax import memo
    from scaletax.inputs import hardware, models

    _PROTO = os.dup(1)
    os.dup2(2, 1)
    for name in PRELOAD:
        importlib.import_module(name)
    memo.warm()  # the hash of the library code each cached call keys on: the same all build long
    if hardware.reads() or hardware._USER or models._USER:
        raise RuntimeError("the preload read the GPU catalog or scenario definitions; a forked "
                           "chapter would miss them in its record of reads")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select through the wakeup fd
    die_with_server = lifecycle.die_with_parent()  # made here: "parent" is this server
    children: set[int] = set()
    _write({_READY: True})
    buf = b""
    open_input = True
    while open_input or children:
        if not open_input:  # the runner is done: nothing left may outlive the build
            for pid in list(children):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        try:
            ready, _, _ = select.select([0, wake_r] if open_input else [wake_r], [], [], 1.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        while children:  # reap
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            _write({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                open_input = False
                continue
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                req = json.loads(raw)
                if _threads() != 1:
                    _write({"id": req["id"], "error": f"the server has {_threads()} threads; not forking"})
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _run_and_exit(lambda: _child(req, die_with_server, (wake_r, wake_w, _PROTO)))
                children.add(pid)
                _write({"id": req["id"], "pid": pid})
    return 0


# --------------------------------------------------------------------------------------------
# The kernel: forked by the worker before papermill starts
# --------------------------------------------------------------------------------------------

class Seed:
    """A child forked from the worker that becomes its kernel once told how (:meth:`release`),
    or exits when the worker closes it unused."""

    def __init__(self, pid: int, fd: int):
        self.pid, self._fd = pid, fd

    def release(self, request: dict) -> None:
        os.write(self._fd, json.dumps(request).encode())
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def plant_seed() -> Seed:
    """Fork the kernel-to-be now, while this process has one thread and no event loop."""
    if _threads() != 1:
        raise Unavailable(f"this process has {_threads()} threads; not forking a kernel")
    r, w = os.pipe()
    die_with_worker = lifecycle.die_with_parent()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _run_and_exit(lambda: _grow(r, w, die_with_worker))
    os.close(r)
    return Seed(pid, w)


def _grow(r: int, w: int, die_with_worker) -> int:
    """The seed: wait for the request (end of input unused: exit), then be the kernel."""
    os.close(w)
    os.setsid()  # a session of its own, as jupyter_client starts a kernel
    die_with_worker()
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    return _run_kernel(json.loads(data)) if data else 0


def _run_kernel(req: dict) -> int:
    """``python -m ipykernel_launcher <args>`` in this (forked) process; returns at shutdown
    after the exit handlers a finishing interpreter runs."""
    import atexit

    import ipykernel_launcher
    from ipykernel.kernelapp import IPKernelApp

    _default_signals()
    # the launcher drops the directory `python -m` put first on sys.path (the server's, here);
    # IPython puts '' back
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = [ipykernel_launcher.__file__, *req["args"]]
    # parent_handle: IPKernelApp reads JPY_PARENT_PID when imported (in the server, without it)
    IPKernelApp.launch_instance(argv=req["args"], parent_handle=int(req["env"]["JPY_PARENT_PID"]))
    atexit._run_exitfuncs()
    return 0


def _kernel_classes():
    """The provisioner and manager papermill is given (imported late: jupyter_client)."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    class _Process:
        """The seed as ``subprocess.Popen`` looks to LocalProvisioner (it is our child)."""

        def __init__(self, pid: int):
            self.pid, self.returncode = pid, None
            self.stdin = self.stdout = self.stderr = None

        def poll(self):
            if self.returncode is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

        def wait(self, timeout=None):
            while self.poll() is None:
                time.sleep(0.01)
            return self.returncode

        def send_signal(self, sig):
            if self.poll() is None:
                os.kill(self.pid, sig)

        def kill(self):
            self.send_signal(signal.SIGKILL)

        def terminate(self):
            self.send_signal(signal.SIGTERM)

    class SeedProvisioner(LocalProvisioner):
        """LocalProvisioner whose launch releases the seed instead of starting a process
        (for the ipykernel command line; anything else is launched as usual)."""

        seed: Seed | None = None

        async def launch_kernel(self, cmd, **kwargs):
            seed, self.seed = self.seed, None
            if seed is None or cmd[1:3] != ["-m", "ipykernel_launcher"]:
                if seed is not None:
                    seed.close()
                return await super().launch_kernel(cmd, **kwargs)
            env = dict(kwargs.get("env") or os.environ)
            env["JPY_PARENT_PID"] = str(os.getpid())  # as jupyter_client's launcher sets it
            cwd = str(kwargs.get("cwd") or os.getcwd())
            seed.release({"cwd": cwd, "env": env, "args": list(cmd[3:])})
            self.process = _Process(seed.pid)
            self.pid = self.pgid = seed.pid  # the seed is a session (and group) leader
            self.cwd = cwd
            return self.connection_info

    class SeededKernelManager(AsyncKernelManager):
        """An AsyncKernelManager whose kernel is the seed of :data:`seed` (set per process)."""

        seed: Seed | None = None

        def __init__(self, **kw):
            super().__init__(**kw)
            self.provisioner = SeedProvisioner(kernel_id=self.kernel_id or "", kernel_spec=self.kernel_spec,
                                               parent=self)
            self.provisioner.seed, SeededKernelManager.seed = SeededKernelManager.seed, None

    return SeededKernelManager


def seeded_kernel_manager(seed: Seed):
    """The kernel manager class to hand papermill (``kernel_manager_class``): its kernel is
    ``seed``."""
    cls = _kernel_classes()
    cls.seed = seed
    return cls


# --------------------------------------------------------------------------------------------
# A warm `python -m <module>`: imported while the chapters run, run when the build needs it
# --------------------------------------------------------------------------------------------

#: What ``python -m sphinx`` imports to build the book (Sphinx, its builders, the book's
#: extensions and theme): a :class:`Warm` Sphinx imports them at the start of the build, while a
#: core is idle, instead of on the HTML step's critical path.
SPHINX_PRELOAD = (
    "sphinx.cmd.build", "sphinx.application", "sphinx.builders.html", "sphinx.builders.latex",
    "sphinx.ext.intersphinx", "myst_parser", "myst_nb", "myst_nb.sphinx_ext", "jupyter_book",
    "sphinx_book_theme", "pydata_sphinx_theme", "sphinx_togglebutton", "sphinx_copybutton", "sphinx_design",
    "sphinx_external_toc", "sphinxcontrib.bibtex", "sphinx_multitoc_numbering",
    "scaletax.report.sphinx_once", "scaletax.report.numbering",
)


class Warm:
    """A process that imports ``preload`` now and, once :meth:`run` says so, runs ``python -m
    module *args`` in ``cwd`` with its output in ``log``: what a fresh ``python -m`` would do
    (same environment, given at the start; ``sys.argv`` and ``sys.path[0]`` as ``-m`` sets them),
    minus the imports. ``proc`` is its ``Popen`` (own session, SIGKILL when the build dies);
    :meth:`close` ends it unused."""

    def __init__(self, module: str, preload: tuple[str, ...], env: dict[str, str]):
        self.module = module
        with lifecycle.Interrupts.deferred():  # an interrupt during the fork: once proc is set
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "scaletax.report.prefork", "--warm", *preload], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=lifecycle.die_with_parent())

    def run(self, args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
        """Start the module (returns ``proc``; its exit status is the module's)."""
        msg = {"module": self.module, "args": [str(a) for a in args], "cwd": str(cwd), "log": str(log)}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.close()
        return self.proc

    def close(self) -> None:
        """End it if it was never run."""
        if self.proc.poll() is None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # end of input unused: it exits
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _warm_main(preload: list[str]) -> int:
    """:class:`Warm`'s process: import ``preload`` (a module that fails is left to the run to
    report), read one request, become ``python -m module args``."""
    import runpy

    for name in preload:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0
    req = json.loads(line)
    _redirect_output(req["log"])
    os.chdir(req["cwd"])
    sys.path[0] = req["cwd"]  # `python -m` puts the working directory first
    sys.argv = [req["module"], *req["args"]]
    try:
        runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--warm"]:
    code = _warm_main(sys.argv[2:])
    import atexit

    atexit._run_exitfuncs()  # what a finishing interpreter runs (logging's flush among them)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    # no teardown: freeing Sphinx's modules and build environment one object at a time took
    # 0.55 s of the HTML step's 4.2 (and 0.6 CPU s), after every file was written and closed
    # (the same HTML, byte for byte, measured 2026-12-02 on the default book)
    os._exit(code)
elif __name__ == "__main__":
    code = serve()
    sys.stderr.flush()
    os._exit(code)  # no teardown of the preloaded modules: the runner waits for this exit
