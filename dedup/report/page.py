"""`OUTPUT/_report/index.html`: one self-contained page that says what a run removed and why.

Everything the page shows comes from the manifest and a few small summaries gathered after the
run (cluster sizes, the largest clusters with a few members, the similarity histogram of the
candidate pairs, contamination by file and record with an example). Plots are matplotlib
figures inlined as SVG; the page loads nothing from the network and works from a file or an
object store.
"""

from __future__ import annotations

import difflib
import functools
import io
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from markupsafe import Markup, escape

from dedup.core.lsh import probability
from dedup.report.shown import SHOWN_CHARS, shorten

log = logging.getLogger("dedup")

EXCERPT_WORDS, EXCERPT_LEAD = 160, 25
"""Words of a document shown beside another: from EXCERPT_LEAD words before where the two first differ."""
MATCH_CHARS = 300
"""Characters shown on each side of a protected n-gram in a contaminated document."""


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
    record_examples: dict[tuple[str, str], tuple[Any, str]] = field(default_factory=dict)
    """(file, record) -> (id, text) of a document the record's n-grams removed."""
    near_pairs: list[dict[str, Any]] = field(default_factory=list)
    """Candidate pairs nearest the threshold: side ("merged"/"not merged"), ids, texts, similarities."""


MARGINS = {"left": 0.17, "right": 0.9, "top": 0.92}
"""The plots' margins, as shares of the figure, fixed (room for counts up to 100,000,000 and the
right axis's label): a tight bounding box, measured at each save, drew every figure twice, a third
of the time the page took to draw."""


def _svg(fig: Any) -> Markup:
    """The figure as inline SVG markup (matplotlib's own, trusted: not escaped)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return Markup(text[text.index("<svg"):])


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


def _plots(manifest: dict[str, Any], extras: Extras) -> dict[str, Markup]:
    plt = plotting()
    out: dict[str, Markup] = {}
    p = manifest["parameters"]
    hist = manifest.get("similarity_histogram") or []
    if hist:
        fig, ax = plt.subplots(figsize=(7, 3.2))
        edges = np.linspace(0.0, 1.0, len(hist) + 1)
        ax.stairs(hist, edges, fill=True, color="#4c78a8", label="candidate pairs")
        ax.axvline(p["threshold"], color="#e45756", linestyle="--", label=f"threshold {p['threshold']}")
        unit = f"{p['shingle_size']}-{p.get('shingle_unit', 'word')} shingles"
        ax.set_xlabel("similarity (" + ("exact Jaccard" if p["confirm"] == "exact" else "MinHash estimate") +
                      f", {unit})")
        ax.set_ylabel("candidate pairs")
        ax.set_xlim(0, 1)
        ax.set_yscale("symlog")
        _plain_counts(ax)
        ax2 = ax.twinx()
        s = np.linspace(0, 1, 201)
        ax2.plot(s, probability(s, p["num_bands"], p["rows_per_band"]), color="#54a24b",
                 label=f"P(candidate), {p['num_bands']} x {p['rows_per_band']}")
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("P(candidate)")
        fig.subplots_adjust(**MARGINS, bottom=0.27)
        fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)  # below the axes, off the data
        out["similarity"] = _svg(fig)
    to_survivor = manifest.get("survivor_histogram") or []
    if sum(to_survivor):
        fig, ax = plt.subplots(figsize=(7, 3.0))
        edges = np.linspace(0.0, 1.0, len(to_survivor) + 1)
        ax.stairs(to_survivor, edges, fill=True, color="#72b7b2")
        ax.axvline(p["threshold"], color="#e45756", linestyle="--")
        ax.text(p["threshold"], 1.02, f" threshold {p['threshold']}", transform=ax.get_xaxis_transform(),
                color="#e45756", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel("similarity to the document kept in its place (" +
                      ("exact Jaccard" if p["confirm"] == "exact" else "MinHash estimate") + ")")
        ax.set_ylabel("near duplicates")
        ax.set_yscale("symlog")
        _plain_counts(ax)
        fig.subplots_adjust(**MARGINS, bottom=0.17)
        out["to_survivor"] = _svg(fig)
    if extras.cluster_sizes:
        out["sizes"] = _sizes_plot(plt, extras.cluster_sizes)
    return out


def size_bins(sizes: dict[int, int]) -> list[tuple[str, int]]:
    """Clusters counted in bins of sizes doubling from 2 (2, 3-4, 5-8, ...), labelled; empty bins
    between the smallest and the largest kept, so the axis is a log scale of size."""
    if not sizes:
        return []
    top = max(sizes)
    bins: list[tuple[str, int]] = []
    lo = 2
    while lo <= top:
        hi = 2 * lo - 2 if lo > 2 else 2
        label = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        bins.append((label, sum(n for k, n in sizes.items() if lo <= k <= hi)))
        lo = hi + 1
    return bins


def _sizes_plot(plt: Any, sizes: dict[int, int]) -> Markup:
    bins = size_bins(sizes)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(range(len(bins)), [n for _, n in bins], color="#f58518")
    ax.set_xticks(range(len(bins)), [label for label, _ in bins], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("cluster size (documents), bins doubling")
    ax.set_ylabel("clusters")
    ax.set_yscale("symlog")
    _plain_counts(ax)
    top = max(sizes)
    ax.annotate(f"largest: {top:,}", xy=(len(bins) - 1, sizes[top]), xytext=(0, 14), textcoords="offset points",
                ha="right", fontsize=8, arrowprops={"arrowstyle": "-", "color": "#666"})
    fig.subplots_adjust(**MARGINS, bottom=0.3)
    return _svg(fig)


@dataclass
class Excerpt:
    """Words of a text to show, each marked when it differs from the other text; cut before or after."""

    words: list[tuple[str, bool]]
    cut_before: bool = False
    cut_after: bool = False


def diff_excerpts(a: str, b: str, words: int = EXCERPT_WORDS, lead: int = EXCERPT_LEAD) -> tuple[Excerpt, Excerpt]:
    """Both texts from a little before where they first differ, the words that differ marked."""
    wa, wb = (a or "").split(), (b or "").split()
    la, lb = [w.lower() for w in wa[:5000]], [w.lower() for w in wb[:5000]]
    ma, mb = np.zeros(len(wa), bool), np.zeros(len(wb), bool)
    first_a = first_b = None
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, la, lb, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        ma[i1:i2], mb[j1:j2] = True, True
        if first_a is None:
            first_a, first_b = i1, j1
    sa = max(0, (first_a or 0) - lead)
    sb = max(0, (first_b or 0) - lead)
    return (Excerpt([(w, bool(m)) for w, m in zip(wa[sa:sa + words], ma[sa:sa + words])], sa > 0, sa + words < len(wa)),
            Excerpt([(w, bool(m)) for w, m in zip(wb[sb:sb + words], mb[sb:sb + words])], sb > 0, sb + words < len(wb)))


def match_excerpt(text: str, ngram: str, chars: int = MATCH_CHARS) -> dict[str, str] | None:
    """The passage of `text` around the first place its words are the n-gram's (before, match, after)."""
    gram = ngram.lower().split()
    spans = [(m.start(), m.end(), m.group().lower()) for m in re.finditer(r"\w+", text or "")]
    words = [w for _, _, w in spans]
    for i in range(len(words) - len(gram) + 1):
        if words[i:i + len(gram)] == gram:
            start, end = spans[i][0], spans[i + len(gram) - 1][1]
            lo, hi = max(0, start - chars), min(len(text), end + chars)
            return {"before": ("… " if lo else "") + text[lo:start], "match": _short_words(text[start:end]),
                    "after": text[end:hi] + (" …" if hi < len(text) else "")}
    return None


def _short_words(text: str) -> str:
    """`text` with every word longer than `SHOWN_CHARS` shortened as ids are (a 200,000-character word
    once made a 1.4 MB page)."""
    return re.sub(rf"\S{{{SHOWN_CHARS + 1},}}", lambda m: shorten(m.group()), text)


def _excerpt_html(e: Excerpt) -> Markup:
    words = " ".join(f"<mark>{escape(shorten(w))}</mark>" if marked else str(escape(shorten(w))) for w, marked in e.words)
    return Markup(("… " if e.cut_before else "") + words + (" …" if e.cut_after else ""))


def _similarity(estimate: float, jaccard: float) -> str:
    return f"estimate {estimate:.3f}" + (f", exact Jaccard {jaccard:.3f}" if jaccard == jaccard else "")


def _survivor_words(m: dict[str, Any]) -> str:
    """What the histogram of similarities to the survivor says, for the cluster mode the run used."""
    below, scored, threshold = m.get("below_threshold_to_survivor", 0), m["near_duplicates_found"], \
        m["parameters"]["threshold"]
    if m.get("cluster_mode") == "centred":
        return (f"Centred clusters: every near duplicate reaches the threshold {threshold} with its survivor. "
                f"{below:,} documents were below it with their connected component's survivor and were clustered "
                f"again among themselves ({m.get('survivor_rounds', 1) - 1} more round(s)).")
    share = 100 * below / max(scored, 1)
    hint = " Run with --clusters centred to keep every removed document within the threshold of its survivor." \
        if below else ""
    return (f"Connected clusters: {below:,} of {scored:,} near duplicates ({share:.1f}%) are below the threshold "
            f"{threshold} with the document kept in their place; chains of confirmed pairs joined them to it.{hint}")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.6rem} h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
table{border-collapse:collapse;margin:.5rem 0} td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums} td.chosen{font-weight:bold;background:#eef5ff}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:.8rem;margin:.6rem 0 1.2rem}
.doc{background:#f7f7f7;border:1px solid #e3e3e3;padding:.5rem;font-size:.85rem;white-space:pre-wrap;overflow-wrap:anywhere}
.doc-id{font-size:.8rem;color:#555;margin-bottom:.2rem}
mark{background:#ffe08a} .warn{background:#fff1f0;border:1px solid #e45756;padding:.6rem;margin:.6rem 0}
code{background:#f2f2f2;padding:0 .2rem} td,th,h4,p{overflow-wrap:anywhere} svg{max-width:100%;height:auto}
#records th,#records td.n{white-space:nowrap} #records td:nth-child(1){min-width:12rem}
#records td:nth-child(2){min-width:4rem} #records td:nth-child(5){min-width:10rem} #records td:last-child{width:45%}
"""

RECORDS_SHOWN = 25


@functools.cache
def _template() -> Any:
    """The page's template, compiled once a process (22 ms a compile: a program that runs many jobs,
    such as the test suite, compiled it for each page)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("dedup.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("page.html.j2")


def run_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    """The page's record of the run: what it read and wrote, and every option that shaped the result
    (the similarity parameters have their own table), as (name, value) rows."""
    yes_no = {True: "yes", False: "no"}
    rows = [("input", f"{m['input']} ({m['input_files']:,} files)"), ("output", m["output"]),
            ("dry run", yes_no[bool(m.get("dry_run"))]), ("id column", m.get("id_column") or ""),
            ("text column", m.get("text_column") or "")]
    protected = m.get("protected_files") or []
    rows.append(("protected files", ", ".join(protected) if protected else "none: no decontamination"))
    if protected:
        rows.append(("--max-contaminated", f"{m.get('max_contaminated')}"))
    lines = m.get("lines")
    rows.append(("line dedup", f"yes, on the survivors: a line of {lines.get('min_line_words', 1)} words or more "
                               f"(--min-line-words) repeated {lines['min_copies']} times or more (--min-copies) is kept "
                               "only where it first occurs" if lines else "no"))
    if lines:
        rows.append(("--max-lines-removed", f"{m.get('max_lines_removed')}"))
    spans = m.get("spans")
    rows.append(("span dedup", f"yes, on the survivors: runs of {spans['span_tokens']} {spans['unit']}s or more "
                               f"(--span-tokens) seen twice are cut, --spans-keep {spans['keep']}" if spans else "no"))
    if m.get("near_dedup"):
        b = m.get("banding") or {}
        if b:
            rec = b.get("recommended") or {}
            chosen = ("the one `dedup tune` recommends for the threshold"
                      if rec and (rec.get("num_bands"), rec.get("rows_per_band")) == (b["num_bands"], b["rows_per_band"])
                      else f"given; {rec.get('num_bands')} x {rec.get('rows_per_band')} is recommended" if rec else "given")
            rows.append(("banding", f"{b['num_bands']} x {b['rows_per_band']}: a pair at the threshold is a candidate "
                                    f"{100 * b['candidate_at_threshold']:.1f}% of the time ({chosen})"))
        rows += [("near duplicates", "dropped" if m.get("drop_duplicates") else "kept and tagged (--keep-duplicates)"),
                 ("survivor (--keep-by)", m.get("keep_by") or "the smallest id"),
                 ("clusters (--clusters)", m.get("cluster_mode") or "connected"),
                 ("cluster sizes (--cluster-size)", yes_no[bool(m.get("cluster_size"))]),
                 ("index (_index/)", "written" if m.get("index") else "not written")]
    for earlier in m.get("earlier_outputs") or []:
        near = earlier.get("near_duplicates")
        rows.append(("--against", f"{earlier['output']}: {earlier['indexed_documents']:,} indexed documents"
                                  + (f", {near:,} near duplicates of them" if near is not None else "")))
    if m.get("against"):
        rows.append(("near duplicates of earlier outputs", f"{m.get('near_duplicates_of_indexed', 0):,}"))
        rows.append(("skipped, id already indexed (--skip-existing)", f"{m.get('skipped_existing') or 0:,}"))
    if r := m.get("resumed"):
        of = r.get("of", "interrupted run")
        rows.append(("resumed", f"from {r['from']}, reusing {', '.join(r['reused'])} of {'a' if of == 'dry run' else 'an'} {of} "
                                f"({r.get('reused_seconds', 0):.1f} s of its stages)"))
    return rows


def _lines_section(lines: dict[str, Any] | None) -> dict[str, Any] | None:
    """The page's repeated lines: the counts, the most repeated lines, the share histogram's rows."""
    if not lines:
        return None
    bins = len(lines["share_histogram"])
    hist = [{"range": f"{100 * i // bins}-{100 * (i + 1) // bins}%", "documents": n}
            for i, n in enumerate(lines["share_histogram"])]
    top = [{"count": t["count"], "text": t["text"], "document": shorten(t["document"]), "line": t["line"]}  # shortened
           for t in lines["top_lines"]]
    cells = {(w["min_copies"], w["min_line_words"]): w["share"] for w in lines.get("what_if", [])}
    copies = sorted({c for c, _ in cells})
    words = sorted({w for _, w in cells})
    what_if = {"words": words, "rows": [{"copies": c, "shares": [cells[(c, w)] for w in words],
                                         "chosen": [(c, w) == (lines["min_copies"], lines.get("min_line_words"))
                                                    for w in words]} for c in copies]}
    return {**lines, "top": top, "hist": hist, "what_if": what_if}


def _spans_section(spans: dict[str, Any]) -> dict[str, Any] | None:
    """The page's repeated spans: the counts, the most repeated spans, the share histogram's rows."""
    if not spans:
        return None
    bins = len(spans["share_histogram"])
    hist = [{"range": f"{100 * i // bins}-{100 * (i + 1) // bins}%", "documents": n}
            for i, n in enumerate(spans["share_histogram"])]
    top = [{**t, "document": shorten(t["document"])} for t in spans.get("top_spans", [])]
    return {**spans, "top": top, "hist": hist}


WITHIN_SHOWN = 50
"""The `--within` values the page lists (the manifest has up to 1,000)."""
EVAL_RECORDS_SHOWN = 20
"""The records most leaked the page lists (`_report/eval_records.parquet` has them all)."""


def eval_side(records: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The page's eval side: a row per eval file (records, found, clean, largest share found, longest
    run), and the records most leaked (by share found, then longest run, then documents)."""
    if records is None or not len(records):
        return [], []
    by_file = records.assign(found=records["documents"] > 0).groupby("file", sort=False).agg(
        records=("record", "size"), found=("found", "sum"), top_share=("found_share", "max"),
        longest=("longest_run", "max")).reset_index()
    files = [{**r, "clean": int(r["records"] - r["found"])} for r in by_file.to_dict("records")]
    top = records[records["documents"] > 0].sort_values(["found_share", "longest_run", "documents"], ascending=False,
                                                        kind="stable").head(EVAL_RECORDS_SHOWN)
    return files, [{**r, "record": shorten(r["record"])} for r in top.to_dict("records")]


def render(manifest: dict[str, Any], extras: Extras, eval_records: Any = None) -> str:
    """The page, as one HTML string (`templates/page.html.j2`, every value escaped by Jinja2);
    `eval_records`: the eval side (`removed.EVAL_RECORDS`' frame), when protected files were given."""
    m = manifest
    total = m["input_rows"] or 1
    skipped = m.get("skipped_existing") or 0
    ln = m.get("lines") or {}
    emptied = ln.get("documents_dropped", 0) + ln.get("documents_contaminated", 0)
    cont = m.get("contamination") or {}
    rows = [("input rows", m["input_rows"]), ("contaminated, dropped", m["contaminated_dropped"]),
            *([("contaminated, kept tagged", cont["tagged"])] if cont.get("action") == "tag" else []),
            *([("contaminated, kept cut", cont["cut"])] if cont.get("action") == "cut" else []),
            ("near duplicates found", m["near_duplicates_found"]),
            ("near duplicates dropped", m["near_duplicates_dropped"]),
            *([("near duplicates kept whole, in clusters below --min-cluster-size", m["near_duplicates_kept_whole"])]
              if m.get("min_cluster_size", 2) > 2 else []),
            *([("skipped, id already indexed", skipped)] if skipped else []),
            *([("left without a word by line dedup, dropped", ln["documents_dropped"]),
               ("contaminated after line dedup, dropped", ln.get("documents_contaminated", 0))] if ln else []),
            ("output rows", m["output_rows"])]
    sp = m.get("spans") or {}
    spans_dropped = sp.get("documents_dropped", 0) + sp.get("documents_contaminated", 0)
    if sp:
        rows[-1:-1] = [("left without a word by span dedup, dropped", sp["documents_dropped"]),
                       ("contaminated after span dedup, dropped", sp.get("documents_contaminated", 0))]
    counts = [(name, value, value / total) for name, value in rows]
    if ln:  # the text line dedup took, beside the rows: most of it can go while every row stays
        counts.append(("characters removed by line dedup (of the survivors')", ln["characters_removed"],
                       ln.get("characters_removed_share", 0.0)))
    clusters = []
    for c in extras.clusters:
        members = []
        for mem in c.members:
            left, right = diff_excerpts(c.root_text, mem["text"])
            members.append({"id": shorten(mem["id"]), "similarity": _similarity(mem["estimate"], mem["jaccard"]),
                            "root_excerpt": left, "excerpt": right})
        clusters.append({"root": shorten(c.root), "size": c.size, "members": members})
    near_pairs = []
    for pair in extras.near_pairs:
        left, right = diff_excerpts(pair["left_text"], pair["right_text"])
        near_pairs.append({"side": pair["side"], "left_id": shorten(pair["left_id"]), "right_id": shorten(pair["right_id"]),
                           "similarity": _similarity(pair["estimate"], pair["jaccard"]), "left": left, "right": right})
    records = []
    for r in m.get("contaminated_by_record", [])[:RECORDS_SHOWN]:
        found = extras.record_examples.get((r["file"], r["record"]))
        example = None
        if found is not None:
            ident, text = found
            passage = match_excerpt(text, r["ngram"]) or {"before": text[:2 * MATCH_CHARS], "match": "", "after": ""}
            example = {"id": shorten(ident), **passage}
        records.append({"file": r["file"], "record": shorten(r["record"]), "documents": r["documents"],
                        "listed": r.get("listed"),
                        "ngram": shorten(r["ngram"]), "example": example})
    p = {**m["parameters"], "shingle_unit": m["parameters"].get("shingle_unit", "word")}
    eval_files, eval_top = eval_side(eval_records)
    return str(_template().render(
        m=m, p=p, css=Markup(CSS), counts=counts, total=total, skipped=skipped, emptied=emptied,
        lines=_lines_section(m.get("lines")), spans=_spans_section(sp), spans_dropped=spans_dropped,
        plots=_plots(m, extras),
        to_survivor=_survivor_words(m) if m.get("near_dedup") else "", near_pairs=near_pairs, clusters=clusters,
        records=records, parameters=sorted(m["parameters"].items()), run=run_rows(m), excerpt=_excerpt_html,
        contamination=cont, common=[{"ngram": shorten(c["ngram"]), "documents": c["documents"]}
                                    for c in cont.get("common_ngrams_listed", [])[:EVAL_RECORDS_SHOWN]],
        eval_files=eval_files, eval_top=eval_top,
        within_values=[{**v, "value": "(null)" if v["value"] is None else shorten(v["value"])}
                       for v in (m.get("within") or {}).get("values", [])[:WITHIN_SHOWN]]))
