"""The image dedup steps inside a real Beam pipeline, on real photos with
planted duplicates (tests/dedup_photos.py), fetched images made as the fetch
stage makes them."""

from __future__ import annotations

import glob
import os
import pickle

import apache_beam as beam
import pytest

from corpora.dedup.images import DUPLICATE_IMAGE, EVAL_CONTAMINATION, NEAR_DUPLICATE_IMAGE
from corpora.dedup.phash import DEFAULT_DISTANCE, phash_of_image
from corpora.fetch import attach_images, process_image
from corpora.fetch.settings import FetchSettings
from corpora.record import Document, ImageChunk, TextChunk
from pipelines.dedup_images import ExactImages, NearImages, PostFetchImages
from tests.dedup_photos import EXACT, NEAR, planted
from tests.pipelines.direct import direct_pipeline

SETTINGS = FetchSettings(image_size=64, perceptual_hash=True)


def _records(photos) -> list[Document]:
    docs = []
    for index, ((photo, variant), data) in enumerate(sorted(photos.items())):
        url = f"http://photos.test/{photo}/{variant}"
        doc = Document(f"{index:03d}", "coyo", (ImageChunk(url), TextChunk(photo)))
        docs.append(attach_images(doc, {url: process_image(data, SETTINGS)}, True))
    return docs


def _run(docs, workers=1, near=True, evals=(), output=None):
    pipeline = direct_pipeline(workers)
    batches = pipeline | beam.Create([docs[i : i + 7] for i in range(0, len(docs), 7)])
    # with an output, the batches wait in its stash while the rules decide
    exact = batches | "Exact" >> ExactImages(
        "dedup_images", "bytes", True, None, True, output=output
    )
    near_ = exact["docs"] | "Near" >> NearImages(
        "near_images", DEFAULT_DISTANCE, near, True, eval_hashes=evals, output=output
    )
    kept = near_["docs"] | beam.FlatMap(lambda batch: [d.images[0].url for d in batch])
    drops = (exact["dropped"], near_["dropped"]) | beam.Flatten()
    results = {
        "kept": kept,
        "drops": drops | beam.Map(lambda d: (d.url, d.reason)),
        "reports": (exact["report"], near_["report"]) | "Reports" >> beam.Flatten(),
    }
    return pipeline, results


def _collect(pipeline, results, folder) -> dict:
    """Run ``pipeline``; every element of each of ``results`` (by name)."""
    for name, pcoll in results.items():
        _ = (
            pcoll
            | f"Pickle{name}" >> beam.Map(lambda x: pickle.dumps(x).hex())
            | f"Write{name}" >> beam.io.WriteToText(os.path.join(folder, name))
        )
    pipeline.run().wait_until_finish()
    found = {}
    for name in results:
        found[name] = [
            pickle.loads(bytes.fromhex(line))
            for path in sorted(glob.glob(os.path.join(folder, name + "*")))
            for line in open(path).read().split()
        ]
    return found


@pytest.mark.parametrize("near", [False, True])
def test_exact_removes_exactly_the_copies_and_near_the_planted_near_duplicates(near, tmp_path):
    photos = planted()
    docs = _records(photos)
    pipeline, results = _run(docs, near=near, output=str(tmp_path / "build") if near else None)
    seen = _collect(pipeline, results, str(tmp_path))
    drops = dict(seen["drops"])
    originals = sorted({photo for photo, _ in photos})
    copies = {f"http://photos.test/{p}/{v}" for p in originals for v in EXACT}
    originals_urls = {f"http://photos.test/{p}/original" for p in originals}
    # the copy sorts before the original here, so the copy is kept: the smaller record id
    exact_removed = {u for u, why in drops.items() if why == DUPLICATE_IMAGE}
    assert exact_removed == originals_urls
    kept = set(seen["kept"])
    assert copies <= kept  # no two unrelated photos merged: every photo is still there
    near_removed = {u for u, why in drops.items() if why == NEAR_DUPLICATE_IMAGE}
    if not near:
        assert not near_removed and len(kept) == len(docs) - len(originals)
        return
    planted_near = {f"http://photos.test/{p}/{v}" for p in originals for v in NEAR}
    assert near_removed <= planted_near
    assert len(near_removed) >= 0.95 * len(planted_near), sorted(planted_near - near_removed)
    reports = {tuple(sorted(r["removed"])): r for r in seen["reports"]}
    near_report = next(r for r in seen["reports"] if "radius" in r)
    assert near_report["removed"] == {NEAR_DUPLICATE_IMAGE: len(near_removed)}
    assert near_report["clusters"] == len(originals)
    assert reports


def test_images_near_an_evaluation_image_are_removed_and_only_those(tmp_path):
    photos = planted()
    docs = _records({k: v for k, v in photos.items() if k[1] in ("original", "q60")})
    evals = (phash_of_image(photos["coffee", "crop"]), phash_of_image(photos["rocket", "png"]))
    pipeline, results = _run(docs, near=False, evals=evals)
    seen = _collect(pipeline, results, str(tmp_path))
    contaminated = sorted(u for u, why in seen["drops"] if why == EVAL_CONTAMINATION)
    assert contaminated == [
        f"http://photos.test/{p}/{v}" for p in ("coffee", "rocket") for v in ("original", "q60")
    ]


def test_an_interleaved_document_loses_the_later_copy_and_keeps_its_text(tmp_path):
    photos = planted()
    image = process_image(photos["rocket", "original"], SETTINGS)
    other = process_image(photos["camera", "original"], SETTINGS)

    def doc(id_, urls, outcomes):
        chunks = tuple(c for u in urls for c in (ImageChunk(u), TextChunk(f"{id_} {u}")))
        return attach_images(Document(id_, "mmc4", chunks), outcomes, False)

    docs = [
        doc(
            "b",
            ["http://x/copy", "http://x/camera"],
            {"http://x/copy": image, "http://x/camera": other},
        ),
        doc("a", ["http://x/rocket"], {"http://x/rocket": image}),
        doc("c", ["http://x/again"], {"http://x/again": image}),
    ]
    pipeline = direct_pipeline(2)
    batches = pipeline | beam.Create([docs[:2], docs[2:]])
    exact = batches | ExactImages("duplicate_images", "bytes", True, None, False)
    seen = _collect(
        pipeline,
        {
            "kept": exact["docs"] | beam.FlatMap(lambda batch: batch),
            "drops": exact["dropped"],
        },
        str(tmp_path),
    )
    kept = {d.id: d for d in seen["kept"]}
    assert seen["drops"] == []
    assert [i.url for i in kept["a"].images] == ["http://x/rocket"]  # the smallest id keeps it
    assert [i.url for i in kept["b"].images] == ["http://x/camera"]
    assert kept["b"].meta["images_removed"] == {DUPLICATE_IMAGE: 1}
    assert kept["c"].images == [] and len(kept["c"].texts) == 1  # its layout decides


def test_the_components_combine_gives_the_union_find_reference_however_pairs_are_split():
    import random

    from corpora.dedup.lsh import components
    from pipelines.dedup_images import Components

    rng = random.Random(5)
    nodes = [(f"r{i:02d}", i % 3) for i in range(40)]
    edges = [tuple(sorted(rng.sample(nodes, 2))) for _ in range(30)]
    expected = sorted(
        (n, r) for n, r in components(nodes, edges).items() if n != r or any(n in e for e in edges)
    )
    combine = Components()
    for _ in range(5):
        rng.shuffle(edges)
        cut = rng.randrange(len(edges))
        parts = [combine.create_accumulator(), combine.create_accumulator()]
        for index, edge in enumerate(edges):
            parts[index < cut] = combine.add_input(parts[index < cut], edge)
        merged = combine.merge_accumulators(parts)
        assert combine.extract_output(merged) == expected


def test_one_pass_decides_as_the_exact_then_the_near_step(tmp_path):
    """PostFetchImages (both rules over one stash pass, what a build runs) gives
    the records, drops and reports of ExactImages then NearImages, on documents
    of three images where an exact copy comes before a near duplicate (the near
    report's positions are those after the exact removals), for documents
    (images removed) and pairs (records dropped), in one pipeline."""
    photos = planted()
    keys = sorted(photos)
    order = [keys[(7 * i) % len(keys)] for i in range(len(keys))]  # copies spread over documents
    outcomes = {f"http://x/{p}/{v}": process_image(photos[p, v], SETTINGS) for p, v in order}
    docs = []
    for index in range(0, len(order), 3):
        urls = [f"http://x/{p}/{v}" for p, v in order[index : index + 3]]
        chunks = tuple(c for u in urls for c in (ImageChunk(u), TextChunk(u)))
        docs.append(attach_images(Document(f"{index:03d}", "mmc4", chunks), outcomes, False))
    pipeline = direct_pipeline(1)
    batches = pipeline | beam.Create([docs[i : i + 5] for i in range(0, len(docs), 5)])
    output = str(tmp_path / "out")
    names = ("duplicate_images", "near_duplicate_images")
    results = {}
    for drop in (False, True):
        exact = batches | f"Exact{drop}" >> ExactImages(
            names[0], "bytes", True, None, drop, output=output
        )
        near = exact["docs"] | f"Near{drop}" >> NearImages(
            names[1], DEFAULT_DISTANCE, True, drop, output=output
        )
        both = batches | f"Both{drop}" >> PostFetchImages(
            *names, True, None, DEFAULT_DISTANCE, True, drop, output=output
        )
        sides = {
            "two": (near["docs"], (exact["dropped"], near["dropped"]), exact["report"],
                    near["report"]),
            "one": (both["docs"], (both["dropped"], both["dropped_near"]), both["report"],
                    both["report_near"]),
        }  # fmt: skip
        for side, (kept, drops, exact_report, near_report) in sides.items():
            name = f"{side}{drop}"
            results[name + "kept"] = kept | f"{name}Kept" >> beam.FlatMap(
                lambda batch: [(d.id, [c.url for c in d.images], d.meta) for d in batch]
            )
            results[name + "drops"] = (
                drops
                | f"{name}Drops" >> beam.Flatten()
                | f"{name}Reasons" >> beam.Map(lambda d: (d.record_id, d.reason))
            )
            results[name + "exact"], results[name + "near"] = exact_report, near_report
    seen = _collect(pipeline, results, str(tmp_path))
    for drop in (False, True):
        for what in ("kept", "drops", "exact", "near"):
            one, two = seen[f"one{drop}{what}"], seen[f"two{drop}{what}"]
            assert sorted(map(repr, one)) == sorted(map(repr, two)), (drop, what)
        assert seen[f"two{drop}near"][0]["removed"]  # the near rule removed something
    assert any(d[2].get("images_removed") for d in seen["twoFalsekept"])
    assert seen["twoTruedrops"]
