"""`dedup ARGS...` as a real child process forked from a warm interpreter.

A `dedup` process spends 1.5 to 2.5 CPU-seconds importing dask, distributed, pandas, pyarrow,
numba and matplotlib before it reads an argument, and about 0.3 more loading its compiled kernels
as it first calls them; the suite starts about two hundred of them. Here one interpreter per pytest
process imports them and loads the kernels once, and forks a child for each command: the child
is a process of its own (its pid, working directory, environment, stdin from /dev/null, stdout
and stderr captured, its exit code and signals), runs the same entry point as `python -m dedup`
and ends the same way. What it skips is only the imports and the loading. The tests of start-up and exit
themselves (that `--threads` never imports distributed, that `dedup` ends its forkserver) start a
cold `python -m dedup`, as do runs started at the same time (the interpreter serves one at a time).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

_SERVER = r"""
import json, os, signal, sys, threading, traceback

import dask.dataframe, distributed, pandas, pyarrow.parquet  # noqa: F401
import dedup.cli, dedup.job.pipeline, dedup.report.page  # noqa: F401
from dedup.partition.warm import warm_kernels

warm_kernels()  # every kernel loaded (or compiled) once, not in each child
dedup.report.page.plotting()
# what the imports made is never garbage: kept out of every collection, in this process and in each
# child (a child's collection would otherwise walk, and copy, every page of the heap it shares)
import gc

gc.collect()
gc.freeze()
if threading.active_count() != 1:  # a thread would not survive the fork: say so, and serve nothing
    sys.exit(f"warm dedup: {threading.active_count()} threads after the imports, cannot fork safely")
out = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    req = json.loads(line)
    # opened here, before the fork: once the caller has the pid, the child holds them (a FIFO too)
    fds = [os.open(os.devnull, os.O_RDONLY), os.open(req["stdout"], os.O_WRONLY), os.open(req["stderr"], os.O_WRONLY)]
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            import dask.config
            dask.config.refresh()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            sys.stdin = open(0, closefd=False)
            sys.argv = ["dedup", *req["args"]]
            try:
                dedup.cli.entry()  # exits the process itself after a run
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    out.write(json.dumps({"pid": pid}) + "\n")
    out.flush()
    _, status = os.waitpid(pid, 0)
    out.write(json.dumps({"status": status}) + "\n")
    out.flush()
"""

_server: subprocess.Popen[str] | None = None


def _start() -> subprocess.Popen[str]:
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, cwd=Path(__file__).resolve().parents[1])
        atexit.register(_stop, _server)
    return _server


def _stop(server: subprocess.Popen[str]) -> None:
    if server.poll() is None:
        assert server.stdin is not None
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _reply(server: subprocess.Popen[str], timeout: float | None) -> dict[str, int]:
    assert server.stdout is not None
    if timeout is not None and not select.select([server.stdout], [], [], timeout)[0]:
        raise TimeoutError
    line = server.stdout.readline()
    if not line:
        raise RuntimeError(f"the warm dedup interpreter ended (exit code {server.wait()})")
    return json.loads(line)


class WarmChild:
    """`dedup ARGS...` started as a child of the warm interpreter, in `cwd` with `env` (this process's
    environment by default). Its stdout goes to a file; its stderr to a file, or with `stream` to a
    FIFO read line by line as it is written (`stderr`), as from a pipe."""

    def __init__(self, args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
                 stream: bool = False) -> None:
        self.args = ["dedup", *args]
        self.server = _start()
        self._tmp = tempfile.TemporaryDirectory()
        self.paths = {name: Path(self._tmp.name) / name for name in ("stdout", "stderr")}
        self.paths["stdout"].touch()
        self.stderr = None
        if stream:
            os.mkfifo(self.paths["stderr"])
            # the read end first and not blocking, so that the interpreter's open for writing returns
            fd = os.open(self.paths["stderr"], os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
            self.stderr = open(fd, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by close()
        else:
            self.paths["stderr"].touch()
        request = {"args": list(args), "cwd": str(cwd or Path.cwd()), "env": dict(os.environ if env is None else env),
                   **{name: str(p) for name, p in self.paths.items()}}
        assert self.server.stdin is not None
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        self.pid = _reply(self.server, 60)["pid"]
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """The exit code (-N when killed by signal N); `subprocess.TimeoutExpired` after `timeout` s."""
        if self.returncode is None:
            try:
                status = _reply(self.server, timeout)["status"]
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        """The exit code if the child has ended, else None (as `Popen.poll`)."""
        if self.returncode is None:
            assert self.server.stdout is not None
            if select.select([self.server.stdout], [], [], 0)[0]:
                return self.wait()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.kill(sig)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end; (stdout, the rest of stderr), as `Popen.communicate` with text output."""
        rest = self.stderr.read() if self.stderr is not None else ""
        self.wait(timeout)
        out, err = self.output()
        return out, rest or err

    def kill(self, sig: int = signal.SIGKILL, group: bool = False) -> None:
        """Send `sig` to the child (with `group`, to every process it started too)."""
        if self.returncode is None:
            (os.killpg if group else os.kill)(self.pid, sig)

    def output(self) -> tuple[str, str]:
        """What the child wrote to stdout, and to stderr (when not streamed)."""
        err = "" if self.stderr is not None else self.paths["stderr"].read_text()
        return self.paths["stdout"].read_text(), err

    def close(self) -> None:
        """Kill the child's process group if it still runs, wait for it, remove its files."""
        if self.returncode is None:
            self.kill(signal.SIGKILL, group=True)
            self.wait(60)
        if self.stderr is not None:
            self.stderr.close()
        self._tmp.cleanup()


def run_warm(args: list[str], cwd: Path | None, timeout: float,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`dedup ARGS...` run to its end by a child of the warm interpreter, in `cwd` with `env` (this
    process's environment by default); its exit code (-N when killed by signal N) and output as text."""
    child = WarmChild(args, cwd, env)
    try:
        code = child.wait(timeout)
        out, err = child.output()
    finally:
        child.close()
    return subprocess.CompletedProcess(child.args, code, out, err)
