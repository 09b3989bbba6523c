"""The stage list: its order, where a plugin's stages go, the options it
brings, and docs/architecture.md's table of it."""

from __future__ import annotations

import os
import re

import pytest

from corpora import stages
from corpora.config import catalog
from corpora.config.settings import corpus_settings
from corpora.config.spec import Option
from corpora.stages import Stage, StageError
from tests.helpers import REPO


def _names(stages_: tuple[Stage, ...]) -> list[str]:
    return [stage.name for stage in stages_]


def test_each_corpus_runs_the_stages_that_apply_to_it():
    def active(corpus: str, **given) -> list[str]:
        settings = corpus_settings(corpus, ("x",), "out", **given)
        return _names(stages.active(catalog.get(corpus), settings))

    assert active("c4") == ["read", "spread", "dedup_index", "pack"]  # no image stage for text
    # exact image dedup is on by default: by bytes, after the fetch
    assert active("mmc4") == ["read", "filter", "spread", "fetch", "duplicate_images", "layout",
                              "dedup_index", "pack"]  # fmt: skip
    assert active("mmc4-pairs") == [
        "read", "spread", "fetch", "duplicate_images", "dedup_index", "pack"]  # fmt: skip
    assert active("c4", dedup_text="near")[:3] == ["read", "spread", "dedup_text"]
    assert active("coyo", top_fraction=0.5)[:5] == ["read", "filter", "spread", "select", "fetch"]
    assert "select" not in active("coyo")
    assert active("mmc4-pairs", dedup_images="off") == [
        "read", "spread", "fetch", "dedup_index", "pack"]  # fmt: skip
    assert active("mmc4-pairs", dedup_images="near") == [
        "read", "spread", "duplicate_image_urls", "fetch", "duplicate_images",
        "near_duplicate_images", "dedup_index", "pack"]  # fmt: skip
    assert active("coyo", dedup_images="off", max_image_repeats=10)[2:6] == [
        "spread", "duplicate_image_urls", "fetch", "duplicate_images"]  # fmt: skip
    assert "near_duplicate_images" in active("coyo", decontaminate=(REPO,))


def test_fetch_runs_the_prefix_of_the_list_through_the_fetch():
    assert _names(stages.through(stages.FETCH, stages.STAGES)) == [
        "read", "filter", "spread", "select", "decontaminate_text", "exclude_seen", "dedup_text",
        "duplicate_image_urls", "fetch"]  # fmt: skip
    with pytest.raises(StageError, match="no stage fetch among read, spread, pack"):
        stages.through(stages.FETCH, (stages.STAGES[0], stages.STAGES[2], stages.STAGES[-1]))


def test_plugin_stages_are_refused_in_one_line_where_they_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setenv(stages.STAGES_ENV, "no_such_stage_module")
    with pytest.raises(StageError, match="CORPORA_STAGES names no_such_stage_module, which"):
        stages.all_stages()
    (tmp_path / "placeless.py").write_text(
        "from corpora.stages import Stage\nSTAGES = (Stage('x', 'x', core=len),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(stages.STAGES_ENV, "placeless")
    with pytest.raises(StageError, match=r"stage x of placeless: say where it runs \(after=…\)"):
        stages.all_stages()


def test_two_stages_cannot_declare_one_option():
    a = Stage("a", "", core=len, options=(Option("n", int, 1, ""),))
    b = Stage("b", "", core=len, options=(Option("n", int, 2, ""),), after="a")
    with pytest.raises(StageError, match="option n is declared by stages a and b"):
        stages.check_options(stages.ordered((a,), (b,)))


def test_a_stage_has_exactly_one_way_to_run():
    with pytest.raises(StageError, match="give exactly one of core, spec_core and beam"):
        Stage("x", "", core=len, beam="m:f")
    with pytest.raises(StageError, match="beam is 'module:function'"):
        Stage("x", "", beam="pipelines.transforms.read_step")


def test_architecture_doc_shows_the_stage_list_in_order():
    with open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8") as handle:
        table = handle.read().split("## The stage list", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|[^|]*\| ([^|]+) \|$", table, re.MULTILINE)
    assert [name for name, _, _ in rows] == _names(stages.STAGES)
    for (name, summary, wrapper), stage in zip(rows, stages.STAGES):
        assert summary.strip() == stage.summary, name
        expected = "generic" if stage.beam is None else stage.beam.replace("pipelines.", "")
        assert wrapper.strip().strip("`").replace(".py:", ":") == expected.replace(".", "/"), name
