"""The stages hold to what they declare (`dedup.job.stage`): the list walks under every combination of
options without a cluster, the runner refuses a stage that reads or gives what it did not declare,
and each stage, run alone on a small in-memory frame with only the results it declares it reads,
gives what the per-partition functions (or the contract in plain Python) give."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, ClassVar

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from dedup.config import Params
from dedup.core.text import TEXT_DTYPE
from dedup.job.analysis import STAGES
from dedup.job.checkpoints import Checkpoints
from dedup.job.counts import Report
from dedup.job.stage import ContractError, Job, Settings, Step, View, run_stages, walk
from dedup.partition.buckets import bucket_edges, long_form
from dedup.partition.confirm import confirm_routes, graph_pairs, pairs_with_left, score_at_right
from dedup.partition.features import SIG, document_features
from dedup.partition.roots import roots_of_components, with_ids
from dedup.partition.spans import SpanRule
from dedup.storage.protected import read_protected
from tests.conftest import write_shards
from tests.reference import ref_components, ref_lines, ref_removed_lines, ref_span_removed

LOCAL = {"scheduler": "sync", "dataframe.shuffle.method": "tasks", "dataframe.convert-string": False}
PARAMS = Params(max_bucket=4)
FLAGS = ("near", "protected", "lines", "spans", "against", "centred", "details", "index", "files", "cap")
BY_NAME = {s.name: s for s in STAGES}


def _settings(**on: bool) -> Settings:
    """Settings with each of `FLAGS` on or off (an `against` index is only counted, never read here)."""
    return Settings(PARAMS, near=on.get("near", True), protected=object() if on.get("protected") else None,  # type: ignore[arg-type]
                    lines=on.get("lines", False), against=(object(),) if on.get("against") else (),  # type: ignore[arg-type]
                    clusters="centred" if on.get("centred") else "connected", details=on.get("details", False),
                    index_out="index" if on.get("index") else None, files=on.get("files", False),
                    spans=SpanRule(size=8) if on.get("spans") else None,
                    max_ngram_docs=10 if on.get("cap") else None)


@pytest.mark.parametrize("combo", list(itertools.product([False, True], repeat=len(FLAGS))),
                         ids=lambda c: "-".join(f for f, on in zip(FLAGS, c) if on) or "none")
def test_the_stage_list_walks_under_every_combination_of_options(combo: tuple[bool, ...]) -> None:
    on = dict(zip(FLAGS, combo))
    if (on["centred"] or on["against"]) and not on["near"]:
        return  # refused by `Options` before any work: nothing to walk
    given = {} if on["files"] else {"source": "the caller"}
    names = [s.name for s in walk(STAGES, _settings(**on), given)]
    near = ["buckets", "confirm", "components", *(["survivors"] if on["details"] or on["centred"] else []), "roots"]
    want = [*(["read"] if on["files"] else []), *(["common"] if on["protected"] and on["cap"] else []), "features",
            *(["contamination"] if on["protected"] else []), *(near if on["near"] else []),
            *(["lines"] if on["lines"] else []), *(["spans"] if on["spans"] else []),
            *(["shown"] if on["files"] and on["details"] else []), *(["write"] if on["files"] else []),
            *(["report"] if on["files"] and on["details"] else [])]
    assert names == want


def test_every_result_has_one_giver_and_every_kept_result_is_given() -> None:
    givers: dict[str, str] = {}
    for step in STAGES:
        for g in step.gives:
            assert g not in givers, f"{g} is given by {givers[g]} and {step.name}"
            givers[g] = step.name
        assert set(step.values + step.frames + step.tables) <= set(step.gives), step.name
        assert set(step.needs(_settings(near=True, lines=True, spans=True, details=True, protected=True, cap=True))) <= \
            set(step.reads)
    assert set().union(*(s.reads for s in STAGES)) <= set(givers)


class _Gives(Step):
    name = "gives"
    gives = ("a",)
    kept = False
    timed = False

    def run(self, job: View) -> str:
        job.a = 1
        return ""


class _Reads(Step):
    name = "reads"
    reads: ClassVar[tuple[str, ...]] = ("a",)
    gives = ("b",)
    kept = False
    timed = False
    read = "a"
    set_to = "b"

    def run(self, job: View) -> str:
        setattr(job, self.set_to, getattr(job, self.read))
        return ""


def _job() -> Job:
    return Job(Settings(PARAMS), Report(), Checkpoints.nowhere())


def test_the_runner_holds_each_stage_to_its_declaration() -> None:
    assert run_stages(_job(), [_Gives(), _Reads()]).given == {"a": 1, "b": 1}
    with pytest.raises(ContractError, match="'reads' reads a, which no stage before it gives"):
        run_stages(_job(), [_Reads()])
    with pytest.raises(ContractError, match="'gives' gives a, which 'gives' gave"):
        walk([_Gives(), _Gives()], Settings(PARAMS))
    undeclared = _Reads()
    undeclared.read = "z"
    with pytest.raises(ContractError, match="'reads' reads 'z', which it does not declare"):
        run_stages(_job(), [_Gives(), undeclared])
    sets_other = _Reads()
    sets_other.set_to = "a"
    with pytest.raises(ContractError, match="'reads' sets 'a', which it does not declare"):
        run_stages(_job(), [_Gives(), sets_other])
    lazy = _Reads()
    lazy.set_to = "c"  # declared nowhere: refused as it is set, before the check that it gave "b"
    with pytest.raises(ContractError):
        run_stages(_job(), [_Gives(), lazy])

    class _Silent(_Reads):
        def run(self, job: View) -> str:
            return ""

    with pytest.raises(ContractError, match="'reads' did not give b"):
        run_stages(_job(), [_Gives(), _Silent()])


@pytest.mark.parametrize("result", sorted({g for step in STAGES for g in step.gives}))
def test_every_result_reads_back_as_given(result: str) -> None:
    """A stage reading a result gets what the stage before it gave, whatever its name: none is shadowed
    by what a view holds of its own (the write's `written` once was, so the page re-read its texts)."""
    gives, reads = _Gives(), _Reads()
    gives.gives = (result,)
    gives.run = lambda job: setattr(job, result, ("given", result)) or ""  # type: ignore[method-assign]
    reads.reads, reads.read = (result,), result
    assert run_stages(_job(), [gives, reads]).given["b"] == ("given", result)


# each stage alone on a small frame


LINES = ["Copyright the authors of this page.", "All rights reserved by them."]


@pytest.fixture(scope="module")
def documents(skewed_frame: pd.DataFrame) -> pd.DataFrame:
    """The §7 corpus with a bucket too large for all pairs (> max_bucket 4), and two boilerplate lines
    in a few documents, texts typed as the job reads them."""
    texts = skewed_frame["text"].tolist()
    for i in range(0, len(texts), 7):
        texts[i] = f"{texts[i]}\n{LINES[i % 2]}"
    return pd.DataFrame({"id": skewed_frame["id"], "text": pd.Series(texts, dtype=TEXT_DTYPE)})


def _whole_run(documents: pd.DataFrame, npartitions: int, **options: Any) -> Job:
    settings = Settings(PARAMS, details=True, **options)
    job = Job(settings, Report(), Checkpoints.nowhere(),
              given={"source": dd.from_pandas(documents, npartitions=npartitions, sort=False)})
    with dask.config.set(LOCAL):
        return run_stages(job, STAGES)


@pytest.fixture(scope="module")
def whole(documents: pd.DataFrame, protected_file: Path) -> Job:
    """Every stage on one partition (where the bucket edges are those of the functions by hand: with
    more, same-text copies collapse per partition, `test_stages`), decontaminated, with line dedup."""
    return _whole_run(documents, 1, protected=read_protected([protected_file], PARAMS.ngram_size), lines=True,
                      spans=SpanRule(size=8))


def _alone(whole: Job, name: str) -> Job:
    """The stage `name` run alone: a job given only the results it declares it needs, from `whole`, and
    the report's counts (its context: a stage reads the input's rows and contaminated documents there,
    removed and hit)."""
    step = BY_NAME[name]
    need = step.needs(whole.settings)
    report = Report(input_rows=whole.report.input_rows, contaminated=whole.report.contaminated,
                    contamination_hit=whole.report.contamination_hit)
    job = Job(whole.settings, report, Checkpoints.nowhere(), whole.plan, given={k: whole.given[k] for k in need})
    with dask.config.set(LOCAL):
        run_stages(job, [step])
    assert set(job.given) == set(need) | set(step.gives)
    return job


def _by_key(feat: pd.DataFrame) -> dict[int, str]:
    return dict(zip(feat["doc"].tolist(), feat["_id"].tolist()))


def _computed(frame: Any) -> pd.DataFrame:
    with dask.config.set(LOCAL):
        return frame.compute()


def test_the_lines_stage_alone_removes_the_lines_of_the_contract(whole: Job, documents: pd.DataFrame) -> None:
    """On the survivors only (§6b): neither a contaminated document's lines nor a dropped near
    duplicate's count."""
    job = _alone(whole, "lines")
    feat = _computed(whole.given["feat"])
    contaminated = set(feat.loc[feat["source"] >= 0, "_id"])
    roots = _computed(whole.given["roots"])
    dropped = {i for i, r in zip(roots["_id"], roots["root"]) if i != r}
    assert contaminated and dropped
    survivors = documents[~documents["id"].isin(contaminated | dropped)]
    want = ref_removed_lines(survivors["id"].tolist(), survivors["text"].tolist())
    assert job.given["line_counts"]["lines_removed"] == len(want) > 0
    assert job.given["line_counts"]["documents_changed"] == len({i for i, _ in want})
    changes = _computed(job.given["line_changes"])
    assert sorted(_by_key(feat)[d] for d in changes["doc"]) == sorted({i for i, _ in want})


def test_the_spans_stage_alone_cuts_the_spans_of_the_contract(whole: Job, documents: pd.DataFrame) -> None:
    """On the survivors, their texts as line dedup leaves them (§6c)."""
    job = _alone(whole, "spans")
    feat = _computed(whole.given["feat"])
    keys = _by_key(feat)
    contaminated = set(feat.loc[feat["source"] >= 0, "_id"])
    roots = _computed(whole.given["roots"])
    dropped = {i for i, r in zip(roots["_id"], roots["root"]) if i != r}
    line_dropped = {keys[d] for d in _computed(whole.given["line_changes"]).query("fate != 0")["doc"]}
    survivors = documents[~documents["id"].isin(contaminated | dropped | line_dropped)]
    lines = ref_lines(survivors["id"].tolist(), survivors["text"].tolist())
    texts = [lines[i] for i in survivors["id"]]
    removed = ref_span_removed(survivors["id"].tolist(), texts, 8)
    changed = {i for i, r in removed.items() if any(r)}
    assert job.given["span_counts"]["tokens_removed"] == sum(sum(r) for r in removed.values()) > 0
    assert sorted(keys[d] for d in _computed(job.given["span_changes"])["doc"]) == sorted(changed)


def test_the_features_stage_alone_gives_each_documents_features(whole: Job, documents: pd.DataFrame) -> None:
    job = _alone(whole, "features")
    texts = _computed(whole.given["source"])
    feat = _computed(job.given["feat"])
    one = document_features(texts.reset_index(drop=True), "id", "text", PARAMS, whole.settings.protected,
                            partition_info={"number": 0})
    assert feat["_id"].tolist() == documents["id"].tolist() == one["_id"].tolist()
    assert (np.stack(feat[SIG].to_list()) == np.stack(one[SIG].to_list())).all()
    assert (feat["source"].to_numpy() >= 0).tolist() == (one["source"].to_numpy() >= 0).tolist()


def test_the_contamination_stage_alone_counts_the_documents_the_features_mark(whole: Job) -> None:
    job = _alone(whole, "contamination")
    feat = _computed(whole.given["feat"])
    assert job.report.contaminated_records >= 1
    assert sum(job.report.contaminated_by_file.values()) == int((feat["source"] >= 0).sum()) > 0
    assert set(job.given["examples"]["doc"]) <= set(feat.loc[feat["source"] >= 0, "doc"])


def _pairs(frame: pd.DataFrame, keys: dict[int, str], *columns: str) -> set[tuple[str, ...]]:
    return {tuple(keys[int(v)] for v in row) for row in frame[list(columns)].to_numpy()}


@pytest.fixture(scope="module")
def by_hand(whole: Job) -> dict[str, Any]:
    """The near-dedup stages by the per-partition functions, the whole corpus as one partition."""
    texts = _computed(whole.given["source"]).reset_index(drop=True)
    feat = document_features(texts, "id", "text", PARAMS, whole.settings.protected, partition_info={"number": 0})
    edges = bucket_edges(long_form(feat, PARAMS), PARAMS.max_bucket)
    scored = score_at_right(pairs_with_left(confirm_routes(edges), feat, texts, "text", PARAMS), feat, texts, "text",
                            PARAMS)
    graph = graph_pairs(scored, feat, n_new=1, partition_info={"number": 0})
    return {"feat": feat, "edges": edges, "graph": graph, "keys": _by_key(feat)}


def test_the_buckets_stage_alone_gives_the_bucket_edges(whole: Job, by_hand: dict[str, Any]) -> None:
    job = _alone(whole, "buckets")
    keys = _by_key(_computed(whole.given["feat"]))
    got = _computed(job.given["edges"])
    assert _pairs(got, keys, "left", "right") == _pairs(by_hand["edges"], by_hand["keys"], "left", "right")
    assert job.given["edge_rows"] == len(got) and job.given["layout"] is None and job.given["idx_feat"] is None


def test_the_confirm_stage_alone_gives_the_confirmed_graph(whole: Job, by_hand: dict[str, Any]) -> None:
    job = _alone(whole, "confirm")
    keys = _by_key(_computed(whole.given["feat"]))
    graph = _computed(job.given["graph"])
    assert _pairs(graph, keys, "left", "right") == _pairs(by_hand["graph"], by_hand["keys"], "left", "right")
    assert job.given["graph_edges"] == len(graph) > 0


def _components_of(graph: pd.DataFrame, keys: dict[int, str]) -> set[frozenset[str]]:
    adjacent: dict[int, set[int]] = {}
    for a, b in graph[["left", "right"]].to_numpy():
        adjacent.setdefault(int(a), set()).add(int(b))
        adjacent.setdefault(int(b), set()).add(int(a))
    return {frozenset(keys[k] for k in c) for c in ref_components(adjacent, set(adjacent))}


def _groups(labels: pd.DataFrame, keys: dict[int, str]) -> set[frozenset[str]]:
    return {frozenset(keys[int(d)] for d in g["doc"]) for _, g in labels.groupby("label")}


def test_the_components_stage_alone_gives_the_connected_components(whole: Job) -> None:
    job = _alone(whole, "components")
    keys = _by_key(_computed(whole.given["feat"]))
    labels = _computed(job.given["labels"])
    assert _groups(labels, keys) == _components_of(_computed(whole.given["graph"]), keys)
    assert job.given["placed"] is True  # joined on the client, which puts each label at its document


def test_the_survivors_stage_alone_labels_each_member_with_its_smallest_id(whole: Job) -> None:
    job = _alone(whole, "survivors")
    keys = _by_key(_computed(whole.given["feat"]))
    settled = _computed(job.given["settled"])
    components = _components_of(_computed(whole.given["graph"]), keys)
    assert _groups(settled, keys) == components
    for label, group in settled.groupby("label"):
        assert keys[int(label)] == min(keys[int(d)] for d in group["doc"])


def test_the_roots_stage_alone_gives_each_clusters_root(whole: Job) -> None:
    job = _alone(whole, "roots")
    feat = _computed(whole.given["feat"])
    labels = _computed(whole.given["settled"])[["doc", "label"]]
    want = roots_of_components(with_ids(labels, feat))
    got = _computed(job.given["roots"])
    assert dict(zip(got["_id"], got["root"])) == dict(zip(want["_id"], want["root"]))
    assert job.report.clusters == want["root"].nunique() > 0


def test_the_read_write_and_page_stages_alone_on_files(documents: pd.DataFrame, tmp_path: Path) -> None:
    from dedup.job.pipeline import start
    from dedup.job.plan import Options, prepare

    src = write_shards(documents.assign(text=documents["text"].astype(object)), tmp_path / "in", 2)
    plan = prepare(str(src), str(tmp_path / "out"), Options(params=PARAMS))
    try:
        job = start(plan)
        with dask.config.set(LOCAL):
            run_stages(job, STAGES)
        read = _alone(job, "read")
        assert len(_computed(read.given["source"])) == len(documents)
        write = _alone(job, "write")
        rows = sum(pq.read_metadata(plan.staging.fs.open(f"{plan.staging.tmp}/shard-{i:02d}.parquet", "rb")).num_rows
                   for i in range(2))
        assert rows == int(write.given["written"]["shards"]["rows"].sum()) == len(documents) - job.report.near_duplicates
        page = _alone(job, "report")
        largest = max(job.given["shown"].sizes)
        assert page.given["extras"].clusters and page.given["extras"].clusters[0].size == largest
    finally:
        plan.staging.abandon()
        plan.close()


def test_one_configuration_checked_as_made_and_misspelt_options_refused(tmp_path: Path) -> None:
    from dedup.job.pipeline import run
    from dedup.job.plan import Options
    from dedup.storage.safety import UsageError

    with pytest.raises(UsageError, match="--min-copies is how many occurrences"):
        Options(min_copies=1)
    with pytest.raises(UsageError, match="--clusters says how near duplicates are clustered"):
        Options(near=False, clusters="centred")
    assert Options(max_contaminated=-0.0).max_contaminated == 0.0 and str(Options(max_contaminated=-0.0).max_contaminated) == "0.0"
    with pytest.raises(UsageError, match="unknown option.s. min_copy; the options are"):
        run(str(tmp_path / "in"), str(tmp_path / "out"), min_copy=3)
    assert not (tmp_path / "out").exists()
