"""`dedup ARGS...` as a real child process forked from a warm interpreter.

A `dedup` process spends 1.5 to 2.5 CPU-seconds importing dask, distributed, pandas, pyarrow,
numba and matplotlib before it reads an argument; the suite starts about a hundred of them. Here
one interpreter per pytest process imports them once and forks a child for each command: the child
is a process of its own (its pid, working directory, environment, stdin from /dev/null, stdout
and stderr captured, its exit code and signals), runs the same entry point as `python -m dedup`
and ends the same way. What it skips is only the imports. The tests of start-up itself (that
`--threads` never imports distributed, that the command is installed, Ctrl-C and kills at a
stage's line) start a cold `python -m dedup` instead.
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
import dedup.core._kernels as _k

_k.__name__  # the lazy module loads numba now, once
dedup.report.page.plotting()
if threading.active_count() != 1:  # a thread would not survive the fork: say so, and serve nothing
    sys.exit(f"warm dedup: {threading.active_count()} threads after the imports, cannot fork safely")
out = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    req = json.loads(line)
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
            for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY),
                                   (2, req["stderr"], os.O_WRONLY)):
                os.dup2(os.open(path, mode), fd)
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


def run_warm(args: list[str], cwd: Path | None, timeout: float,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`dedup ARGS...` run to its end by a child of the warm interpreter, in `cwd` with `env` (this
    process's environment by default); its exit code (-N when killed by signal N) and output as text."""
    server = _start()
    assert server.stdin is not None
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: str(Path(tmp) / name) for name in ("stdout", "stderr")}
        for p in paths.values():
            Path(p).touch()
        request = {"args": list(args), "cwd": str(cwd or Path.cwd()), "env": dict(os.environ if env is None else env),
                   **paths}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid = _reply(server, 60)["pid"]
        try:
            status = _reply(server, timeout)["status"]
        except TimeoutError:
            os.killpg(pid, signal.SIGKILL)
            _reply(server, 60)
            raise subprocess.TimeoutExpired(["dedup", *args], timeout) from None
        out, err = (Path(paths[n]).read_text() for n in ("stdout", "stderr"))
    return subprocess.CompletedProcess(["dedup", *args], os.waitstatus_to_exitcode(status), out, err)
