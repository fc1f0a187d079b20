"""Which OUTPUT paths are safe to write: checked before anything runs.

dedup replaces OUTPUT as a whole, so OUTPUT must be a directory that holds nothing the user
still needs: never an input, a protected file or the working directory, nor any of their
parents, never a symlink or a mount point, and never a non-empty directory that dedup did not
write. Paths are compared after resolving `~`, `..`, globs and symlinks.
"""

from __future__ import annotations

import glob
import json
import os
import posixpath
import re
from collections.abc import Sequence
from pathlib import Path

import fsspec

MANIFEST = "_dedup.json"
"""The manifest every dedup output holds; its presence marks OUTPUT complete and ours."""
INCOMPLETE = "_dedup.incomplete"
"""Marks an object-store OUTPUT whose commit is under way (or failed midway): ours, not complete."""


class UsageError(ValueError):
    """A problem with the arguments, paths or input found before any work starts (CLI exit 2)."""


class TooContaminated(RuntimeError):
    """Decontamination would remove more than `--max-contaminated` of the input: the run stops before
    publishing (the CLI's exit 3), OUTPUT as it was."""


class TooManyLinesRemoved(TooContaminated):
    """Line dedup would remove more than `--max-lines-removed` of the surviving documents' characters:
    the run stops before publishing, as `TooContaminated` does (exit 3), OUTPUT as it was."""


def is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _magic(path: str) -> bool:
    return any(c in path for c in "*?[")


def _glob_base(pattern: str) -> str:
    """The directory part of a glob before its first wildcard (`in/*.parquet` -> `in`)."""
    parts = Path(pattern).parts
    base: list[str] = []
    for part in parts:
        if _magic(part):
            break
        base.append(part)
    return str(Path(*base)) if base else "."


def _both(path: str) -> set[Path]:
    """The absolute path as written and with every symlink resolved."""
    p = Path(os.path.expanduser(path.removeprefix("file://")))
    return {Path(os.path.abspath(p)), p.resolve()}


def _related(a: Path, b: Path) -> bool:
    """a and b are the same path, or one lies inside the other."""
    return a == b or a in b.parents or b in a.parents


def input_places(input: str, files: Sequence[str]) -> list[str]:
    """The local paths OUTPUT must stay clear of for this INPUT: the input itself, each file, a glob's base."""
    if is_url(input):
        return []
    literal = not _magic(input) or os.path.exists(os.path.expanduser(input.removeprefix("file://")))
    places = [input] if literal else [_glob_base(input)]
    return places + [f for f in files if not is_url(f)]


def read_json(fs: fsspec.AbstractFileSystem, path: str) -> dict | None:
    """The JSON object in a file dedup wrote: None when there is no file; ValueError naming the file
    when it is not a JSON object (truncated, edited)."""
    try:
        with fs.open(path, "r") as fh:
            value = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a JSON object")
    return value


def read_manifest(fs: fsspec.AbstractFileSystem, root: str) -> dict | None:
    """OUTPUT's manifest if it is one dedup wrote, else None."""
    try:
        m = read_json(fs, f"{root}/{MANIFEST}")
    except ValueError:
        return None
    return m if m is not None and "fingerprint" in m and "output_rows" in m else None


def check_output(output: str, *, inputs: Sequence[str], protected: Sequence[str], overwrite: bool,
                 dry_run: bool = False) -> None:
    """Raise `UsageError` unless writing OUTPUT can harm nothing outside it.

    inputs: the INPUT argument and every input file; protected: the protected files or directories.
    dry_run: a dry run never replaces an output that holds shards (only an earlier dry run's).
    """
    if not output or not output.strip():
        raise UsageError("OUTPUT is empty; give a directory path.")
    if is_url(output):
        _check_url_output(output, inputs, protected, overwrite, dry_run)
        return
    raw = Path(os.path.abspath(os.path.expanduser(output.removeprefix("file://"))))
    if raw.is_symlink():
        raise UsageError(f"OUTPUT {output!r} is a symbolic link (to {os.readlink(raw)!r}); give the real directory, "
                         "dedup never writes through a link.")
    outs = _both(output)
    for place in inputs:
        for out in outs:
            for src in _both(place):
                if _related(out, src):
                    raise UsageError(f"OUTPUT {output!r} is, contains or lies inside the input {place!r}; "
                                     "choose a directory outside the input.")
    for place in protected:
        for out in outs:
            for src in _both(str(place)):
                if _related(out, src) or (src.is_file() and out == src.parent):
                    raise UsageError(f"OUTPUT {output!r} is, contains or lies inside the protected path {str(place)!r}; "
                                     "choose another directory.")
    cwd = Path.cwd().resolve()
    for out in outs:
        if out == cwd or out in cwd.parents:
            raise UsageError(f"OUTPUT {output!r} is the working directory or one of its parents; "
                             "choose a new subdirectory.")
    if raw.exists():
        if not raw.is_dir():
            raise UsageError(f"OUTPUT {output!r} exists and is not a directory; give a directory path.")
        if os.path.ismount(raw) or str(raw.resolve()) in mount_points():
            raise UsageError(f"OUTPUT {output!r} is a mount point, which cannot be replaced atomically; "
                             "give a subdirectory of it.")
        _check_existing(fsspec.filesystem("file"), str(raw), output, overwrite, dry_run)


def mount_points() -> set[str]:
    """Every mount point of this process's mount namespace (Linux), bind mounts of the same file system
    included, which `os.path.ismount` misses; empty where /proc is not there."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return set()
    decode = re.compile(r"\\([0-7]{3})")
    return {decode.sub(lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in lines if len(line.split()) > 4}


def _check_existing(fs: fsspec.AbstractFileSystem, root: str, output: str, overwrite: bool, dry_run: bool) -> None:
    entries = fs.ls(root, detail=False)
    if not entries:
        return
    incomplete = fs.exists(f"{root}/{INCOMPLETE}")  # a dedup publish cut short: nothing in it is worth keeping
    manifest = read_manifest(fs, root)
    planned = manifest is not None and bool(manifest.get("dry_run")) and not dry_run  # a dry run's report, no shard
    if not overwrite and not incomplete and not planned:
        raise UsageError(f"OUTPUT {output!r} is not empty; pass --overwrite to replace an earlier dedup output "
                         "(it is replaced only once the new output is complete).")
    if manifest is None and not incomplete:
        raise UsageError(f"OUTPUT {output!r} holds files dedup did not write (no {MANIFEST}); --overwrite replaces "
                         "only an earlier dedup output or an empty directory. Choose another OUTPUT.")
    if dry_run:
        if manifest is None or not manifest.get("dry_run"):
            raise UsageError(f"OUTPUT {output!r} holds the shards of an earlier run, which a --dry-run would replace "
                             "with only its report; give the dry run a new OUTPUT.")


def _norm_url(path: str) -> tuple[str, str]:
    proto, rest = path.split("://", 1)
    return proto, posixpath.normpath("/" + rest.strip("/"))


def _check_url_output(output: str, inputs: Sequence[str], protected: Sequence[str], overwrite: bool,
                      dry_run: bool) -> None:
    proto, out = _norm_url(output)
    for place in [*inputs, *protected]:
        place = str(place)
        if not is_url(place):
            continue
        p_proto, src = _norm_url(_glob_base(place) if _magic(place) else place)
        if p_proto == proto and (out == src or src.startswith(out + "/") or out.startswith(src + "/")):
            raise UsageError(f"OUTPUT {output!r} is, contains or lies inside {place!r}; choose another prefix.")
    fs, root = fsspec.core.url_to_fs(output)
    if fs.exists(root):
        if not fs.isdir(root):
            raise UsageError(f"OUTPUT {output!r} exists and is a file; give a directory path.")
        _check_existing(fs, root, output, overwrite, dry_run)


def expand_protected(paths: Sequence[str]) -> list[str]:
    """Protected paths as given, with globs expanded (sorted); a pattern that matches nothing is an error."""
    out: list[str] = []
    for p in paths:
        p = str(p)
        if _magic(p) and not is_url(p) and not os.path.exists(p):
            found = sorted(glob.glob(p))
            if not found:
                raise UsageError(f"--protected {p!r} matches no file.")
            out += found
        else:
            out.append(p)
    return out
