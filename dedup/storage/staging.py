"""Writing OUTPUT so that a reader never sees a mix of old and new.

Every run writes into a hidden sibling of OUTPUT (`.NAME.dedup-tmp-TOKEN`), under a lock
(`.NAME.dedup-lock`) that makes a second run on the same OUTPUT fail at once. `commit` then:
- on a local file system, swaps the staging directory and the old OUTPUT in one `renameat2`
  (RENAME_EXCHANGE) call, or renames it into place when there is no OUTPUT yet, and only then
  deletes the old content;
- on an object store (no directory rename: a "move" is copy-then-delete), marks OUTPUT
  `_dedup.incomplete`, deletes the old manifest, copies the new shards, deletes old shards the
  new output does not have, writes the manifest last and removes the mark. The manifest marks
  OUTPUT complete: readers should check it.
Interrupts (SIGINT, SIGTERM) that arrive once the commit has started are deferred: the commit
finishes and the run ends normally, so what the CLI reports always matches what OUTPUT holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import fsspec

from dedup.storage.safety import INCOMPLETE, MANIFEST, UsageError, is_url

log = logging.getLogger("dedup")

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2); False where the system does not support it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(err, f"could not swap {b!r} with the new output: {os.strerror(err)}")


LIVE = "_dedup.live"
"""A token file in the staging directory while its run lives: write tasks check it before each file
(`check_live`), so a task still running after its run failed never writes into a removed directory."""
_STAGING_DIR = re.compile(r"^(.*/\.[^/]+\.dedup-tmp-[0-9a-f]{12})(/|$)")


class RunEnded(RuntimeError):
    """Raised by a write task whose run has ended (its staging directory's token is gone)."""


def check_live(fs: Any, path: str) -> None:
    """Raise `RunEnded` unless the staging directory holding `path` still has its run's token; a path
    outside a staging directory passes."""
    found = _STAGING_DIR.match(path)
    if found and not fs.exists(f"{found.group(1)}/{LIVE}"):
        raise RunEnded(f"the run that wrote {found.group(1)} has ended: not writing {path}")


INTERRUPT_REQUESTED = threading.Event()
"""Set by the CLI's signal handler: a commit that has not started yet must not start."""


class _Deferred:
    """Signals received while a commit runs, recorded instead of raised."""

    def __init__(self) -> None:
        self.received: list[int] = []


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[_Deferred]:
    """Record SIGINT/SIGTERM instead of raising them (main thread only; elsewhere a no-op)."""
    state = _Deferred()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, lambda signum, frame: state.received.append(signum))
    try:
        yield state
    finally:
        for s, h in old.items():
            signal.signal(s, h)


RESUME = "_resume.json"
"""In a staging directory: the fingerprint of the run writing it (what it read, with which parameters)
and when that run started. A later run with the same fingerprint resumes from the stages it finished."""


def fingerprint_changes(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What differs between two runs' fingerprints, in a few words; None when they are the same."""
    if old == new:
        return None
    for key, what in (("version", "dedup's version"), ("code", "dedup's code (an upgrade)"),
                      ("parameters", "the parameters"), ("options", "the options"),
                      ("protected", "the protected files"), ("against", "the earlier outputs (--against)")):
        if old.get(key) != new.get(key):
            return f"{what} changed"
    before, now = old.get("input", {}), new.get("input", {})
    changed = sorted(n for n in set(before) & set(now) if before[n] != now[n])
    added, gone = sorted(set(now) - set(before)), sorted(set(before) - set(now))
    for names, how in ((changed, "changed"), (added, "is new"), (gone, "is gone")):
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            return f"input file {names[0]} {how}{more}"
    return "the run's fingerprint changed"


class Staging:
    """The staging directory of one run and the lock on its OUTPUT.

    Created before any computing, so an unwritable OUTPUT parent or a concurrent run is found
    at once; `commit` publishes it, `discard` removes it; `close` releases the lock.

    With a `fingerprint` (`dedup.job.fingerprint.fingerprint`), the staging directory an interrupted run
    left with the same fingerprint is taken over (`resumed_from`: when that run started), so its
    finished stages are reused; one with another fingerprint is removed, with a line saying what
    changed. `restart` removes it whatever its fingerprint. `keep` (set once a stage has finished)
    makes a failed run leave its staging directory for the next run to resume from.
    """

    def __init__(self, output: str, fingerprint: dict[str, Any] | None = None, restart: bool = False) -> None:
        self.output = output.rstrip("/") or output
        self.remote = is_url(self.output)
        if self.remote:
            self.fs, self.root = fsspec.core.url_to_fs(self.output)
        else:
            self.fs = fsspec.filesystem("file")
            self.root = os.path.abspath(os.path.expanduser(self.output.removeprefix("file://")))
        parent, name = self.root.rsplit("/", 1) if "/" in self.root else (".", self.root)
        self.parent, self.name = parent or "/", name
        self.tmp = f"{parent}/.{name}.dedup-tmp-{uuid.uuid4().hex[:12]}"
        self.lock_path = f"{parent}/.{name}.dedup-lock"
        self._lock_fd: int | None = None
        self._lock_token: str | None = None  # on an object store: what this run wrote into the lock it holds
        self.committed = False
        self.resumable = False  # whether a failure leaves this directory for the same command to resume from
        self.resumed_from: str | None = None
        self.complete = False  # the taken-over staging directory holds a complete output whose publish was cut short
        self.from_dry_run = False  # the taken-over staging directory holds the stages a --dry-run set aside
        self.fingerprint = fingerprint
        try:
            self.fs.makedirs(self.parent, exist_ok=True)
            self._lock()
            self._remove_stale(fingerprint, restart)
            self.fs.makedirs(self.tmp, exist_ok=True)
            if fingerprint is not None:
                self.write_json(RESUME, {"fingerprint": fingerprint, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                         "resumed_from": self.resumed_from})
            self.fs.pipe(f"{self.tmp}/{LIVE}", b"")
        except PermissionError as exc:
            self.close()
            raise UsageError(f"Cannot write next to OUTPUT {output!r} ({exc.strerror or exc}); "
                             "choose a directory you can write to.") from None
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        proto = self.output.split("://", 1)[0] + "://" if self.remote else ""
        return proto + self.tmp

    # -- the lock -------------------------------------------------------------------------------
    def _lock(self) -> None:
        if self.remote:
            if self.fs.exists(self.lock_path) and not self._dead_lock():
                raise UsageError(f"Another dedup run is writing OUTPUT {self.output!r} (lock {self.lock_path!r} exists). "
                                 "If no run is active, delete that lock and try again.")
            token = uuid.uuid4().hex
            with self.fs.open(self.lock_path, "w") as fh:
                json.dump({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time(), "token": token}, fh)
            if self._lock_holder() != token:  # another run wrote its lock between our check and our write
                raise UsageError(f"Another dedup run took the lock on OUTPUT {self.output!r} at the same moment; "
                                 "wait for it to finish.")
            self._lock_token = token
            return
        import fcntl

        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise UsageError(f"Another dedup run is writing OUTPUT {self.output!r}; wait for it to finish.") from None
            try:
                same = os.stat(self.lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:  # else the file was unlinked by the run that held it: lock the new one
                self._lock_fd = fd
                return
            os.close(fd)

    def _lock_holder(self) -> str | None:
        """The token of the run holding the object store's lock (None when there is none, or it is unreadable)."""
        try:
            with self.fs.open(self.lock_path, "r") as fh:
                token = json.load(fh).get("token")
        except (OSError, ValueError, AttributeError):
            return None
        return token if isinstance(token, str) else None

    def _dead_lock(self) -> bool:
        """Whether the object store's lock was left by a run of this machine that is no longer alive
        (a killed client): then it is taken over. One of another machine, or unreadable, is not."""
        try:
            with self.fs.open(self.lock_path, "r") as fh:
                held = json.load(fh)
            if held.get("host") != socket.gethostname() or not isinstance(held.get("pid"), int):
                return False
            os.kill(held["pid"], 0)
        except ProcessLookupError:
            since = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(held["time"])) \
                if isinstance(held.get("time"), (int, float)) else "an unknown time"
            log.warning("the lock %s was left by a run that is no longer alive (pid %d on %s, locked since %s): "
                        "taken over", self.lock_path, held["pid"], held["host"], since)
            return True
        except (OSError, ValueError):
            return False
        return False

    def close(self) -> None:
        """Release the lock (and remove its file) if this run holds it: a run refused because another one
        holds the lock leaves that lock where it is."""
        if self.remote:
            token, self._lock_token = self._lock_token, None
            if token is not None:
                with contextlib.suppress(Exception):
                    if self._lock_holder() == token:
                        self.fs.rm(self.lock_path)
            return
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.lock_path)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _remove_stale(self, fingerprint: dict[str, Any] | None = None, restart: bool = False) -> None:
        """Staging directories that earlier runs on this OUTPUT left behind (a killed client, a lost
        scheduler, a failure after a stage finished): the newest one with this run's fingerprint is
        taken over (`_resume_from`), unless `restart`; the rest are removed."""
        pattern = re.compile(rf"^\.{re.escape(self.name)}\.dedup-(tmp|old)-[0-9a-f]{{12}}$")
        stale = [p for p in self.fs.ls(self.parent, detail=False) if pattern.match(p.rstrip("/").rsplit("/", 1)[-1])]
        stale = [p.rstrip("/") for p in stale]
        if not self.remote and not os.path.exists(self.root):
            # A run killed between the two renames of the fallback commit: put the old output back.
            olds = [p for p in stale if ".dedup-old-" in p and os.path.exists(os.path.join(p, MANIFEST))]
            if olds:
                os.rename(olds[0], self.root)
                log.warning("restored OUTPUT %s from %s, left by an interrupted commit", self.output, olds[0])
                stale.remove(olds[0])
        if fingerprint is not None:
            taken = self._resume_from([p for p in stale if ".dedup-tmp-" in p], fingerprint, restart)
            if taken is not None:
                stale.remove(taken)
        for p in stale:
            if not self.remote and os.path.islink(p):
                os.unlink(p)
            else:
                self.fs.rm(p, recursive=True)
        if stale:
            log.info("removed %d staging director%s left by earlier runs on %s", len(stale),
                     "y" if len(stale) == 1 else "ies", self.output)

    def _resume_from(self, candidates: list[str], fingerprint: dict[str, Any], restart: bool) -> str | None:
        """The staging directory to take over, if one of `candidates` (the newest readable) was left by a
        run with this fingerprint; it becomes this run's (`self.tmp`)."""
        found = []
        for p in candidates:
            if not self.remote and os.path.islink(p):
                continue
            try:
                with self.fs.open(f"{p}/{RESUME}", "r") as fh:
                    found.append((json.load(fh), p))
            except (OSError, ValueError):
                continue
        if not found:
            return None
        info, path = max(found, key=lambda f: str(f[0].get("started", "")))
        when = info.get("started", "an unknown time")
        which = "dry run" if info.get("dry_run") else "interrupted run"
        if restart:
            log.info("--restart: the %s of %s is discarded; starting over", which, when)
            return None
        changed = fingerprint_changes(info.get("fingerprint", {}), fingerprint)
        if changed is not None:
            log.info("not resuming the %s of %s: %s; starting over", which, when, changed)
            return None
        self.tmp, self.resumed_from, self.resumable = path, when, True
        self.complete = self.fs.exists(f"{path}/{MANIFEST}")
        self.from_dry_run = bool(info.get("dry_run"))
        return path

    def set_aside(self, names: list[str], fingerprint: dict[str, Any]) -> str | None:
        """Move the entries `names` of the staging directory into a hidden sibling of their own, with
        `fingerprint`, for a later run with that fingerprint to take over (`_resume_from`): a dry run's
        finished stages, for the same command without --dry-run. On a local file system only (a rename
        each); None elsewhere, or when there is nothing to set aside."""
        if self.remote or not any(os.path.exists(f"{self.tmp}/{n}") for n in names):
            return None
        aside = f"{self.parent}/.{self.name}.dedup-tmp-{uuid.uuid4().hex[:12]}"
        os.makedirs(aside)
        for n in names:
            if os.path.exists(f"{self.tmp}/{n}"):
                os.rename(f"{self.tmp}/{n}", f"{aside}/{n}")
        with open(f"{aside}/{RESUME}", "w", encoding="utf-8") as fh:
            json.dump({"fingerprint": fingerprint, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "dry_run": True},
                      fh, indent=2, sort_keys=True)
        return aside

    # -- writing ----------------------------------------------------------------------------------
    def write_json(self, name: str, obj: Any) -> None:
        with self.fs.open(f"{self.tmp}/{name}", "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True)
            fh.write("\n")

    def remove(self, name: str) -> None:
        """Delete an intermediate entry of the staging directory, if present."""
        path = f"{self.tmp}/{name}"
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def files(self) -> list[str]:
        """Paths of every file in the staging directory, relative to it, sorted."""
        return sorted(p[len(self.tmp) + 1:] for p in self.fs.find(self.tmp))

    def data_bytes(self) -> int:
        """The bytes of the files a dataset reader sees: none under a `_` or `.` directory (index, report)."""
        found = self.fs.find(self.tmp, detail=True)
        return sum(int(info.get("size") or 0) for path, info in found.items()
                   if not any(part.startswith(("_", ".")) for part in path[len(self.tmp) + 1:].split("/")))

    # -- publishing -------------------------------------------------------------------------------
    def commit(self) -> None:
        """Publish the staging directory as OUTPUT (the caller defers interrupts around this)."""
        if INTERRUPT_REQUESTED.is_set():  # an interrupt whose KeyboardInterrupt was swallowed somewhere
            raise KeyboardInterrupt
        self.remove(LIVE)
        if self.remote:  # the fingerprint stays until the copy is done: a run killed midway is finished by the next
            self._commit_remote()
        else:
            self.remove(RESUME)
            self._commit_local()
        self.committed = True

    def _commit_local(self) -> None:
        if not os.path.exists(self.root):
            os.rename(self.tmp, self.root)
            return
        if _exchange(self.tmp, self.root):
            self.committed = True
            self.fs.rm(self.tmp, recursive=True)  # the old output, now at the staging path
            return
        old = self.tmp.replace(".dedup-tmp-", ".dedup-old-")
        os.rename(self.root, old)
        os.rename(self.tmp, self.root)
        self.committed = True
        self.fs.rm(old, recursive=True)

    def _commit_remote(self) -> None:
        new = [f for f in self.files() if f not in (MANIFEST, RESUME)]
        self.fs.makedirs(self.root, exist_ok=True)  # a no-op on object stores; real directories elsewhere
        self.fs.pipe(f"{self.root}/{INCOMPLETE}", b"a dedup commit is under way or failed midway; rerun with --overwrite\n")
        if self.fs.exists(f"{self.root}/{MANIFEST}"):
            self.fs.rm(f"{self.root}/{MANIFEST}")  # OUTPUT is incomplete from here until the new manifest
        for rel in new:
            if "/" in rel:  # fsspec's copy creates no parent directory on file systems that have them
                self.fs.makedirs(f"{self.root}/{rel.rsplit('/', 1)[0]}", exist_ok=True)
            self.fs.copy(f"{self.tmp}/{rel}", f"{self.root}/{rel}")
        keep = set(new) | {MANIFEST, INCOMPLETE}
        if self.fs.exists(self.root):
            for p in self.fs.find(self.root):
                if p[len(self.root) + 1:] not in keep:
                    self.fs.rm(p)
        self.fs.copy(f"{self.tmp}/{MANIFEST}", f"{self.root}/{MANIFEST}")
        self.committed = True
        self.fs.rm(f"{self.root}/{INCOMPLETE}")
        self.fs.rm(self.tmp, recursive=True)

    def abandon(self, settle: Any = None) -> None:
        """After a failure or interrupt: remove the staging directory unless it was published, or it holds
        a complete output an object store's commit failed to publish (the error names it); never raises,
        so the failure that brought us here is the one reported."""
        if self.committed or (self.remote and self.fs.exists(f"{self.tmp}/{MANIFEST}")):
            return
        try:
            if self.resumable:
                self.hold(settle)
                return
            self.discard(settle)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not remove the staging directory %s (%s); remove it by hand", self.url, exc)

    def hold(self, settle: Any = None) -> None:
        """Leave the staging directory for a later run to resume from: the run's token goes, so that no
        write task starts a file in it, and `settle()` waits for the tasks still running."""
        with contextlib.suppress(FileNotFoundError):
            self.remove(LIVE)
        if settle is not None:
            settle()

    def discard(self, settle: Any = None) -> None:
        """Remove the staging directory (OUTPUT is untouched). The run's token goes first, so that no
        write task starts a file in it; `settle()` then waits for the tasks still running, and the
        removal is retried while a late file appears in it."""
        with contextlib.suppress(FileNotFoundError):
            self.remove(LIVE)
        if settle is not None:
            settle()
        for attempt in range(10):
            try:
                if self.fs.exists(self.tmp):
                    self.fs.rm(self.tmp, recursive=True)
                return
            except FileNotFoundError:
                return
            except OSError as exc:  # a file created while it was removed ("Directory not empty")
                if attempt == 9:
                    raise
                log.debug("staging directory not removed yet (%s); trying again", exc)
                time.sleep(0.5)
