"""DedupText inside real Beam pipelines, with 1 and 2 workers."""

from __future__ import annotations

import apache_beam as beam
import pytest

from pipelines.dedup_text import DUPLICATE_TEXT, NEAR_DUPLICATE_TEXT, DedupText
from tests.pipelines.direct import direct_pipeline
from tests.planted_texts import planted

CORPUS = planted(unrelated=120, exact=15, near=30)


def _batches(documents, size=16):
    return [documents[i : i + size] for i in range(0, len(documents), size)]


def run(workers: int, mode: str, tmp_path) -> tuple[set[str], dict[str, str], dict]:
    out = tmp_path / f"{mode}-{workers}"
    with direct_pipeline(workers) as pipeline:
        result = pipeline | beam.Create(_batches(CORPUS.documents)) | DedupText(mode)
        kept = result["kept"] | "KeptIds" >> beam.FlatMap(lambda b: [d.id for d in b])
        drops = result["dropped"] | beam.Map(lambda d: f"{d.record_id}\t{d.reason}")
        (
            kept
            | "KeptSorted" >> beam.combiners.ToList()
            | beam.Map(sorted)
            | "WriteKept" >> beam.Map(lambda ids: (out / "kept").write_text("\n".join(ids)))
        )
        _ = (
            drops
            | "DropsSorted" >> beam.combiners.ToList()
            | "SortDrops" >> beam.Map(sorted)
            | "WriteDrops" >> beam.Map(lambda rows: (out / "drops").write_text("\n".join(rows)))
        )
        _ = result["summary"] | beam.Map(lambda s: (out / "summary").write_text(repr(s)))
    kept = set((out / "kept").read_text().split("\n"))
    drops = dict(line.split("\t") for line in (out / "drops").read_text().split("\n") if line)
    return kept, drops, eval((out / "summary").read_text())


@pytest.fixture(autouse=True)
def _out(tmp_path):
    for name in ("exact-1", "exact-2", "near-1", "near-2"):
        (tmp_path / name).mkdir()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_exact_removes_exactly_the_exact_copies(workers, tmp_path):
    kept, drops, summary = run(workers, "exact", tmp_path)
    assert drops == {copy: DUPLICATE_TEXT for copy in CORPUS.exact}
    assert kept == {d.id for d in CORPUS.documents} - set(CORPUS.exact)
    assert set(CORPUS.originals) <= kept
    assert summary["removed"] == {DUPLICATE_TEXT: 15, NEAR_DUPLICATE_TEXT: 0}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_near_removes_planted_near_copies_and_merges_no_unrelated_text(workers, tmp_path):
    kept, drops, _ = run(workers, "near", tmp_path)
    assert (
        set(CORPUS.originals) <= kept
    )  # no unrelated text merged; originals have the smallest ids
    assert {c for c in CORPUS.exact} <= set(drops)
    assert all(drops[c] == DUPLICATE_TEXT for c in CORPUS.exact)
    found = [c for c in CORPUS.near if drops.get(c) == NEAR_DUPLICATE_TEXT]
    assert len(found) >= 0.95 * len(CORPUS.near)
    assert set(drops) <= set(CORPUS.exact) | set(CORPUS.near)
    assert len(kept) + len(drops) == len(CORPUS.documents)  # the funnel balances


@pytest.mark.slow
def test_one_and_two_workers_decide_the_same(tmp_path):
    assert run(1, "near", tmp_path)[:2] == run(2, "near", tmp_path)[:2]
