"""`OUTPUT/_report/index.html`: one self-contained page that says what a run removed and why.

Everything the page shows comes from the manifest and a few small summaries gathered after the
run (cluster sizes, the largest clusters with a few members, the similarity histogram of the
candidate pairs, contamination by file and record with an example). Plots are matplotlib
figures inlined as SVG; the page loads nothing from the network and works from a file or an
object store.
"""

from __future__ import annotations

import html
import io
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dedup.core.lsh import probability
from dedup.report.shown import shorten

log = logging.getLogger("dedup")

DISPLAY_CHARS = 1200
"""Characters of a document shown in the report."""


@dataclass
class ClusterView:
    """One cluster as the report shows it: its root and a few members with their similarity to it."""

    root: Any
    size: int
    root_text: str
    members: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Extras:
    """The small summaries the page needs beyond the manifest."""

    cluster_sizes: dict[int, int] = field(default_factory=dict)
    clusters: list[ClusterView] = field(default_factory=list)
    record_examples: dict[tuple[str, str], str] = field(default_factory=dict)


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _plain_counts(ax: Any) -> None:
    """Label a log (or symlog) count axis 1, 10, 1,000 rather than as powers of ten: the default
    labels are mathtext, whose parser was most of the client's time drawing the page, for axes whose
    ticks are plain counts."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def plotting() -> Any:
    """matplotlib's pyplot, drawing to files (Agg, SVG text as text). The CLI imports it while the
    cluster starts (`dedup.cli._execute`), before the job: imported while the job runs, it would hold
    the GIL the scheduler in this process needs (docs/performance.md, Design choices)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"
    return plt


def _plots(manifest: dict[str, Any], extras: Extras) -> dict[str, str]:
    plt = plotting()
    out: dict[str, str] = {}
    p = manifest["parameters"]
    hist = manifest.get("similarity_histogram") or []
    if hist:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        edges = np.linspace(0.0, 1.0, len(hist) + 1)
        ax.bar(edges[:-1], hist, width=np.diff(edges), align="edge", color="#4c78a8", label="candidate pairs")
        ax.axvline(p["threshold"], color="#e45756", linestyle="--", label=f"threshold {p['threshold']}")
        unit = f"{p['shingle_size']}-{p.get('shingle_unit', 'word')} shingles"
        ax.set_xlabel("similarity (" + ("exact Jaccard" if p["confirm"] == "exact" else "MinHash estimate") +
                      f", {unit})")
        ax.set_ylabel("candidate pairs")
        ax.set_yscale("symlog")
        _plain_counts(ax)
        ax2 = ax.twinx()
        s = np.linspace(0, 1, 201)
        ax2.plot(s, probability(s, p["num_bands"], p["rows_per_band"]), color="#54a24b",
                 label=f"P(candidate), {p['num_bands']} x {p['rows_per_band']}")
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("P(candidate)")
        fig.legend(loc="upper left", fontsize=8)
        out["similarity"] = _svg(fig)
    to_survivor = manifest.get("survivor_histogram") or []
    if sum(to_survivor):
        fig, ax = plt.subplots(figsize=(7, 3.0))
        edges = np.linspace(0.0, 1.0, len(to_survivor) + 1)
        ax.bar(edges[:-1], to_survivor, width=np.diff(edges), align="edge", color="#72b7b2")
        ax.axvline(p["threshold"], color="#e45756", linestyle="--")
        ax.text(p["threshold"], 1.02, f" threshold {p['threshold']}", transform=ax.get_xaxis_transform(),
                color="#e45756", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel("similarity to the document kept in its place (" +
                      ("exact Jaccard" if p["confirm"] == "exact" else "MinHash estimate") + ")")
        ax.set_ylabel("near duplicates")
        ax.set_yscale("symlog")
        _plain_counts(ax)
        out["to_survivor"] = _svg(fig)
    if extras.cluster_sizes:
        fig, ax = plt.subplots(figsize=(7, 3.0))
        sizes = sorted(extras.cluster_sizes)
        ax.bar(range(len(sizes)), [extras.cluster_sizes[x] for x in sizes], color="#f58518")
        ax.set_xlabel("cluster size (documents)")
        ax.set_ylabel("clusters")
        ax.set_yscale("log")
        _plain_counts(ax)
        ticks = list(range(0, len(sizes), max(1, len(sizes) // 20)))
        ax.set_xticks(ticks, [str(sizes[i]) for i in ticks])
        out["sizes"] = _svg(fig)
    return out


def _diff(a: str, b: str) -> tuple[str, str]:
    """The two texts as HTML, words the other lacks highlighted."""
    wa, wb = a.split(), b.split()
    sa, sb = {w.lower() for w in wb}, {w.lower() for w in wa}

    def mark(words: list[str], other: set[str]) -> str:
        return " ".join(f"<mark>{html.escape(w)}</mark>" if w.lower() not in other else html.escape(w) for w in words)

    return mark(wa, sa), mark(wb, sb)


def _short(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= DISPLAY_CHARS else text[:DISPLAY_CHARS] + " …"


def _survivor_words(m: dict[str, Any]) -> str:
    """What the histogram of similarities to the survivor says, for the cluster mode the run used."""
    below, scored, threshold = m.get("below_threshold_to_survivor", 0), m["near_duplicates_found"], \
        m["parameters"]["threshold"]
    if m.get("cluster_mode") == "centred":
        return (f"<p id='to-survivor'>Centred clusters: every near duplicate reaches the threshold {threshold} with "
                f"its survivor. {below:,} documents were below it with their connected component's survivor and were "
                f"clustered again among themselves ({m.get('survivor_rounds', 1) - 1} more round(s)).</p>")
    share = 100 * below / max(scored, 1)
    hint = " Run with <code>--clusters centred</code> to keep every removed document within the threshold of its " \
        "survivor." if below else ""
    return (f"<p id='to-survivor'>Connected clusters: {below:,} of {scored:,} near duplicates ({share:.1f}%) are below "
            f"the threshold {threshold} with the document kept in their place; chains of confirmed pairs joined "
            f"them to it.{hint}</p>")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.6rem} h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.5rem 0} td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:.8rem;margin:.6rem 0 1.2rem}
.doc{background:#f7f7f7;border:1px solid #e3e3e3;padding:.5rem;font-size:.85rem;white-space:pre-wrap;overflow-wrap:anywhere}
mark{background:#ffe08a} .warn{background:#fff1f0;border:1px solid #e45756;padding:.6rem;margin:.6rem 0}
code{background:#f2f2f2;padding:0 .2rem} td,th,h4,p{overflow-wrap:anywhere} svg{max-width:100%;height:auto}
"""


def render(manifest: dict[str, Any], extras: Extras) -> str:
    """The page, as one HTML string."""
    m = manifest
    e = html.escape
    plots = _plots(m, extras)
    total = m["input_rows"] or 1
    rows = [("input rows", m["input_rows"]), ("contaminated, dropped", m["contaminated_dropped"]),
            ("near duplicates found", m["near_duplicates_found"]),
            ("near duplicates dropped", m["near_duplicates_dropped"]),
            *([("skipped, id already indexed", m["skipped_existing"])] if m.get("skipped_existing") else []),
            ("output rows", m["output_rows"])]
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>dedup report: {e(str(m['output']))}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>What dedup removed, and why</h1><p>Input <code>{e(str(m['input']))}</code> ({m['input_files']:,} "
             f"files) → output <code>{e(str(m['output']))}</code>{' (dry run: no shards written)' if m.get('dry_run') else ''}. "
             "Every removed document is listed, with its reason, in <code>_report/removed.parquet</code>.</p>",
             "<h2>Counts</h2><table id='counts'>"]
    for name, value in rows:
        parts.append(f"<tr><th>{name}</th><td class='n' data-key='{e(name)}'>{value:,}</td>"
                     f"<td class='n'>{100 * value / total:.1f}%</td></tr>")
    skipped = m.get("skipped_existing") or 0
    parts.append(f"</table><p>{m['input_rows']:,} = {m['output_rows']:,} + {m['near_duplicates_dropped']:,} + "
                 f"{m['contaminated_dropped']:,}{f' + {skipped:,}' if skipped else ''} (output + near duplicates dropped + "
                 f"contaminated{' + skipped' if skipped else ''}).</p>")
    for w in m.get("warnings", []):
        parts.append(f"<div class='warn'>{e(w)}</div>")
    if m.get("near_dedup"):
        parts.append(f"<h2>Near duplicates</h2><p>{m['clusters']:,} clusters of two or more documents; the largest has "
                     f"{m['largest_cluster']:,}. {m['candidate_pairs']:,} candidate pairs, {m['confirmed_pairs']:,} "
                     f"confirmed ({m['parameters']['confirm']}), {m['same_text_pairs']:,} pairs of identical texts. "
                     f"Similarity is the Jaccard of {m['parameters']['shingle_size']}-"
                     f"{m['parameters'].get('shingle_unit', 'word')} shingle sets.</p>")
        if "similarity" in plots:
            parts.append("<h3>Similarity of the candidate pairs, and the banding's S-curve</h3>" + plots["similarity"])
        if "to_survivor" in plots:
            parts.append("<h3>How far each near duplicate is from the document kept in its place</h3>"
                         + _survivor_words(m) + plots["to_survivor"])
        if "sizes" in plots:
            parts.append("<h3>Cluster sizes</h3>" + plots["sizes"])
        if extras.clusters:
            parts.append("<h3>The largest clusters</h3><p>The root (kept) on the left; members (dropped) on the right, "
                         "with the words the other text lacks highlighted.</p>")
        for c in extras.clusters:
            parts.append(f"<h4>root {e(shorten(c.root))}: {c.size:,} documents</h4>")
            for mem in c.members:
                left, right = _diff(_short(c.root_text), _short(mem["text"]))
                sim = f"estimate {mem['estimate']:.3f}, exact Jaccard {mem['jaccard']:.3f}"
                parts.append(f"<p>{e(shorten(c.root))} ↔ {e(shorten(mem['id']))}: {sim}</p>"
                             f"<div class='pair'><div class='doc'>{left}</div><div class='doc'>{right}</div></div>")
    if m.get("protected_files"):
        parts.append("<h2>Decontamination</h2><table><tr><th>protected file</th><th>documents removed</th></tr>")
        for f, n in m["contaminated_by_file"].items():
            parts.append(f"<tr><td><code>{e(f)}</code></td><td class='n'>{n:,}</td></tr>")
        parts.append("</table><h3>By record</h3><table><tr><th>file</th><th>record</th><th>documents</th>"
                     "<th>share</th><th>a matching n-gram</th><th>an example document</th></tr>")
        for r in m["contaminated_by_record"][:25]:
            example = extras.record_examples.get((r["file"], r["record"]), "")
            parts.append(f"<tr><td><code>{e(r['file'])}</code></td><td>{e(shorten(r['record']))}</td>"
                         f"<td class='n'>{r['documents']:,}</td><td class='n'>{100 * r['documents'] / total:.1f}%</td>"
                         f"<td><mark>{e(shorten(r['ngram']))}</mark></td>"
                         f"<td><div class='doc'>{e(_short(example)[:400])}</div></td></tr>")
        parts.append("</table>")
    parts.append("<h2>Parameters</h2><table>")
    for k, v in sorted(m["parameters"].items()):
        parts.append(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>")
    parts.append(f"<tr><th>fingerprint</th><td>{e(m['fingerprint'])}</td></tr></table>")
    parts.append("<h2>Stages</h2><table><tr><th>stage</th><th>seconds</th></tr>")
    for k, v in m["seconds"].items():
        parts.append(f"<tr><td>{e(k)}</td><td class='n'>{v:.2f}</td></tr>")
    parts.append("</table><h2>Versions</h2><p>" + ", ".join(f"{e(k)} {e(v)}" for k, v in m["versions"].items()) + "</p>")
    parts.append("</body></html>\n")
    return "".join(parts)
