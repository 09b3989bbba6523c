"""The stages ``build_pipeline`` assembles for a corpus (the pipeline is built,
not run; what each stage writes is tested by the builds in tests/cli)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.pipeline import PipelineVisitor

from corpora.config.settings import corpus_settings
from corpora.tokens.tokenizer import Tokenizer
from pipelines.build import build_pipeline

IMAGE_STAGES = {"Fetch"}


def top_level_stages(corpus: str, **overrides) -> list[str]:
    """The build's top-level transforms, in the order the pipeline holds them."""
    settings = corpus_settings(corpus, ("input",), "out", **overrides)
    tokenizer = Tokenizer(
        settings.tokenizer, settings.tokens_per_image, settings.image_token_id, settings.pad_id
    )
    pipeline = beam.Pipeline()
    build_pipeline(pipeline, settings, tokenizer)
    stages: list[str] = []

    class Visitor(PipelineVisitor):
        def enter_composite_transform(self, node) -> None:
            if node.full_label and "/" not in node.full_label:
                stages.append(node.full_label)

        def visit_transform(self, node) -> None:
            if "/" not in node.full_label:
                stages.append(node.full_label)

    pipeline.visit(Visitor())
    return stages


def test_a_text_corpus_runs_no_image_stage():
    stages = top_level_stages("c4")
    assert IMAGE_STAGES.isdisjoint(stages)
    # raw lines spread and parsed on every worker; then tokenized, packed and counted
    # where each batch is: no document stashed (issue 29)
    order = ["Read", "SpreadLines", "Parse", "PackText"]
    assert [stages.index(name) for name in order] == sorted(stages.index(name) for name in order)
    assert "Spread" not in stages
    assert not {"Tokenize", "PackSequences"} & set(stages)
    # with --pack-groups the groups hash each tokenized document's key: the stashed path
    grouped = top_level_stages("c4", pack_groups=3)
    assert grouped.index("Spread") < grouped.index("Tokenize") < grouped.index("PackSequences")


def test_records_are_spread_after_the_metadata_filter_and_before_selection_and_fetch():
    stages = top_level_stages("mmc4")
    assert IMAGE_STAGES <= set(stages)
    assert stages.index("Filter") < stages.index("Spread") < stages.index("Fetch")
    coyo = top_level_stages("coyo", top_fraction=0.5)
    assert coyo.index("Spread") < coyo.index("TopFraction") < coyo.index("Fetch")


def test_a_global_selection_takes_records_one_by_one_and_batches_them_again():
    stages = top_level_stages("coyo", top_fraction=0.5)
    assert (
        stages.index("Spread")
        < stages.index("UnbatchToSelect")
        < stages.index("TopFraction")
        < stages.index("Rebatch")
        < stages.index("Fetch")
    )
