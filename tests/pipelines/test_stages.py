"""The stage list on Beam: a stage added by one core function and one list
entry (a plugin named by ``CORPORA_STAGES``) runs in ``corpora build`` and
``corpora fetch``, shows its flag in ``--help``, and its drops in the funnel,
the manifest's ``stages`` and ``stats.json``."""

from __future__ import annotations

import json
import os
import textwrap

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from corpora import stages
from corpora.config.settings import corpus_settings
from corpora.config.spec import Option
from corpora.record import Document, Drop, TextChunk
from corpora.stages import Stage
from corpora.store import ImageStore
from pipelines.build import stage_entries
from pipelines.stages import Steps, apply_core, label
from tests.helpers import SMALL_BUILD, load_manifest, run_cli
from tests.pipelines.test_store import SENTENCES, mmc4_input
from tests.servers import ImageServer

# The toy stage, as a user would write it: one core function, one list entry.
TOY = textwrap.dedent(
    """
    import re

    from corpora.config.spec import Option
    from corpora.record import Drop
    from corpora.stages import Stage


    def drop_matching(doc, settings):
        pattern = re.compile(settings.stage_options["drop_matching"])
        if any(pattern.search(chunk.text) for chunk in doc.texts):
            return Drop("text_matches_pattern", doc.id, url=doc.source_url)
        return doc


    STAGES = (
        Stage(
            "regex",
            "drop records whose text matches a pattern",
            core=drop_matching,
            options=(Option("drop_matching", str, None, "a regular expression"),),
            reasons=("text_matches_pattern",),
            after="filter",
            applies=lambda spec, settings: settings.stage_options.get("drop_matching") is not None,
        ),
    )
    """
)
FETCH = ("--allow-private-urls", "--progress-every", "0", "--workers", "1")


@pytest.fixture
def toy_stage(tmp_path, monkeypatch) -> dict[str, str]:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "toy_stage.py").write_text(TOY)
    env = {"PYTHONPATH": str(folder), stages.STAGES_ENV: "toy_stage"}
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(stages.STAGES_ENV, "toy_stage")
    return env


def test_a_plugin_stage_runs_where_it_says(toy_stage):
    names = [stage.name for stage in stages.all_stages()]
    assert names == ["read", "filter", "regex", "spread", "select", "decontaminate_text",
                     "exclude_seen", "dedup_text", "duplicate_image_urls", "fetch",
                     "exclude_seen_images", "duplicate_images", "near_duplicate_images", "clip",
                     "clip_near_duplicates", "layout", "dedup_index", "pack"]  # fmt: skip
    assert "drop_matching" in stages.options()
    settings = corpus_settings("mmc4-pairs", ("d.jsonl",), "out", drop_matching="x")
    assert settings.stage_options["drop_matching"] == "x"
    from corpora.config import catalog

    active = [s.name for s in stages.active(catalog.get("mmc4-pairs"), settings)]
    assert active == ["read", "regex", "spread", "fetch", "duplicate_images", "dedup_index", "pack"]
    without = corpus_settings("mmc4-pairs", ("d.jsonl",), "out")
    assert "regex" not in [s.name for s in stages.active(catalog.get("mmc4-pairs"), without)]


def test_the_generic_wrapper_routes_a_cores_drops_under_its_name():
    def keep_short(doc, settings):
        if len(doc.texts[0].text) > 3:
            return Drop("too_long", doc.id)
        return [doc, doc.replace(id=doc.id + "-copy")]  # an iterable of records is kept

    stage = Stage("short", "", core=keep_short, options=(Option("n", int, 1, ""),))
    settings = corpus_settings("c4", ("c.json",), "out")
    docs = [Document(name, "c4", (TextChunk(text),)) for name, text in (("a", "ab"), ("b", "abcd"))]
    from corpora.config import catalog

    with beam.Pipeline() as pipeline:
        build = Steps(pipeline, settings, catalog.get("c4"))
        kept = apply_core(stage, pipeline | beam.Create([docs]), build)
        ids = kept | beam.Map(lambda batch: sorted(doc.id for doc in batch))
        assert_that(ids, equal_to([["a", "a-copy"]]), label="Kept")
        ((name, drops),) = build.drops
        reasons = drops | beam.Map(lambda d: (d.reason, d.record_id))
        assert_that(reasons, equal_to([("too_long", "b")]), label="Dropped")
    assert name == "short" and label(stage) == "Short"


def test_stage_entries_list_every_stage_run_with_its_drops_and_report():
    read, fetch = stages.STAGES[0], next(s for s in stages.STAGES if s.name == stages.FETCH)
    entries = stage_entries(
        (read, fetch),
        [(("fetch", "http_404"), 1), (("read", "bad_json"), 2), (("fetch", "http_404"), 3)],
        [("fetch", {"hosts": 2})],
    )
    assert entries == [
        {"name": "read", "dropped": {"bad_json": 2}},
        {"name": "fetch", "dropped": {"http_404": 4}, "report": {"hosts": 2}},
    ]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_toy_stage_runs_in_build_and_fetch_with_its_flag_and_its_drops(tmp_path, toy_stage):
    helped = run_cli("build", "--help", env=toy_stage)
    assert helped.returncode == 0, helped.stderr
    assert "--drop-matching" in helped.stdout and "Stage regex:" in helped.stdout
    assert "--drop-matching" in run_cli("fetch", "--help", env=toy_stage).stdout
    first = SENTENCES[0].split()[0]
    with ImageServer() as server:
        given = mmc4_input(str(tmp_path / "docs.jsonl"), server, documents=5)
        output = str(tmp_path / "out")
        built = run_cli("build", "mmc4-pairs", "--input", given, "--output", output,
                        *SMALL_BUILD, "--drop-matching", f"^{first}", env=toy_stage)  # fmt: skip
        assert built.returncode == 0, built.stderr
        requests_of_build = len([r for r in server.requests if r.startswith("/img/")])
        store = str(tmp_path / "store")
        fetched = run_cli("fetch", "mmc4-pairs", "--input", given, "--image-store", store,
                          *FETCH, "--drop-matching", f"^{first}", env=toy_stage)  # fmt: skip
        assert fetched.returncode == 0, fetched.stderr
        requests_of_fetch = len([r for r in server.requests if r.startswith("/img/")])
    manifest = load_manifest(output)
    # each document's first image is matched to the first sentence: 5 of 10 pairs dropped
    assert manifest["funnel"]["input"] == 10 and manifest["funnel"]["kept"] == 5
    assert manifest["funnel"]["dropped"] == {"text_matches_pattern": 5}
    assert [entry["name"] for entry in manifest["stages"]] == [
        "read", "regex", "spread", "fetch", "duplicate_images", "dedup_index", "pack"]  # fmt: skip
    regex = next(entry for entry in manifest["stages"] if entry["name"] == "regex")
    assert regex["dropped"] == {"text_matches_pattern": 5}
    assert manifest["settings"]["stage_options"]["drop_matching"] == f"^{first}"
    with open(os.path.join(output, "stats.json"), encoding="utf-8") as handle:
        funnel = json.load(handle)["funnel"]
    assert "text_matches_pattern" in json.dumps(funnel)
    # the dropped pairs' images were never requested, by the build or by the fetch
    assert requests_of_build == 5 and requests_of_fetch - requests_of_build == 5
    assert ImageStore.open(store).state("docs.jsonl") == "complete"
