"""A real corpus with big clusters, from the machine itself: the license and copyright texts that
installed software ships (Debian's `/usr/share/doc/*/copyright`, `/usr/share/common-licenses/*`, and
the `LICENSE` files of the Python packages installed beside dedup), one document a file.

    python benchmarks/licenses.py OUT_DIR          # writes OUT_DIR/licenses.parquet (id = the file's path)
    dedup run OUT_DIR OUTPUT --keep-duplicates     # then open OUTPUT/_report/index.html

Many packages ship the same license with their own copyright lines: near duplicates, chains of
them, and a few very large clusters, as in a crawl's boilerplate. Which texts there are depends on
the machine; the page of such a run is what docs/performance.md and the report's checks look at.
"""

from __future__ import annotations

import argparse
import glob
import site
import sys
from pathlib import Path

import pandas as pd

PATTERNS = ["/usr/share/doc/*/copyright", "/usr/share/common-licenses/*"]
MAX_BYTES = 200_000
"""Longer files (a few aggregate copyright files run to megabytes) are left out."""


def license_files() -> list[str]:
    found = [f for p in PATTERNS for f in glob.glob(p)]
    for packages in [*site.getsitepackages(), site.getusersitepackages()]:
        found += glob.glob(f"{packages}/*.dist-info/licenses/**/*", recursive=True)
        found += glob.glob(f"{packages}/*.dist-info/LICEN[CS]E*")
        found += glob.glob(f"{packages}/*.dist-info/COPYING*")
    return sorted({f for f in found if Path(f).is_file() and 0 < Path(f).stat().st_size <= MAX_BYTES})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="directory to write licenses.parquet into")
    args = ap.parse_args()
    files = license_files()
    texts = [Path(f).read_text(encoding="utf-8", errors="replace") for f in files]
    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": files, "text": texts}).to_parquet(args.out / "licenses.parquet", index=False)
    print(f"{len(files):,} license and copyright files, {sum(map(len, texts)) / 1e6:.1f} MB of text",
          file=sys.stderr)


if __name__ == "__main__":
    main()
