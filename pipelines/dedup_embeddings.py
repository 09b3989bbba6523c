"""``--near-dup-clip-sim`` as a Beam step (the rule: :mod:`corpora.dedup.embeddings`).

Right after the CLIP stage, which left each image's embedding in its meta:

- each batch's embeddings are filed under their random-hyperplane LSH buckets
  (one element per bucket the batch fills) and the batch is written once to
  the build's stash, only its reference going on
  (:class:`pipelines.dedup_images.Look`);
- each bucket is compared alone, exactly (cosine at least the threshold), a
  pair reported from the first band it shares only;
- the pairs are joined into clusters by the pHash rule's union-find combine
  (:class:`pipelines.dedup_images.Components`: it holds the near pairs, never
  the embeddings), every member but the smallest (record id, position) leaves
  as ``near_duplicate_image``;
- the removals reach the batches as one side input
  (:class:`pipelines.dedup_images.ApplyRemovals`: a pair record is dropped,
  a document loses the image), and every kept image loses its embedding, so
  none reaches a shard.

Every decision depends on record ids and embeddings only, and the hyperplanes
on a fixed seed, so the output is the same whatever the runner and the
number of workers.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from corpora.dedup import embeddings as rule
from corpora.dedup.images import NEAR_DUPLICATE_IMAGE, near_removals
from corpora.record import Document
from pipelines.dedup_images import (
    CLUSTER_MEMBERS,
    FOUND,
    THUMBS,
    ApplyRemovals,
    Components,
    Look,
    by_record,
    cluster_summary,
)
from pipelines.transforms import DROPPED


def _buckets(batch: list[Document]) -> list:
    """A batch's embeddings under their buckets: ``((band, bits), [(node,
    float32 bytes), …])``, one element per bucket the batch fills."""
    members = [m for doc in batch for m in rule.image_embeddings(doc)]
    found = rule.buckets(members)
    return sorted(
        (band, [(node, embedding.tobytes()) for node, embedding in nodes])
        for band, nodes in found.items()
    )


def _pairs_in_bucket(item, threshold: float) -> list:
    (band, _), parts = item
    members = [
        (node, np.frombuffer(data, dtype=np.float32)) for part in parts for node, data in part
    ]
    return rule.near_pairs(members, threshold, band)


def _without_embeddings(batch: list[Document]) -> list[Document]:
    return [rule.without_embeddings(doc) for doc in batch]


class ClipNearImages(beam.PTransform):
    """``near_duplicate_image`` by CLIP image embeddings at least ``threshold``
    apart in cosine. Returns ``{"docs", "dropped", "report"}``."""

    def __init__(self, name: str, threshold: float, drop_document: bool, output: str | None):
        super().__init__()
        self._name, self._threshold = name, threshold
        self._drop_document, self._output = drop_document, output

    def expand(self, batches):
        name, threshold = self._name, self._threshold
        looked = batches | f"{name}Look" >> beam.ParDo(
            Look({FOUND: _buckets}, self._output)
        ).with_outputs(FOUND, main="batches")
        edges = (
            looked[FOUND]
            | f"{name}Buckets" >> beam.GroupByKey()
            | f"{name}Pairs" >> beam.FlatMap(_pairs_in_bucket, threshold=threshold)
        )
        labels = (
            edges
            | f"{name}Components" >> beam.CombineGlobally(Components())
            | f"{name}Labels" >> beam.FlatMap(lambda labels: labels)
        )
        entries = labels | f"{name}Entries" >> beam.FlatMap(
            lambda kv: [(r, (p, why)) for r, p, why in near_removals([kv])]
        )
        removed = entries | f"{name}Removed" >> beam.combiners.Count.Globally()
        largest, sizes, wanted = cluster_summary(labels, name)
        applied = looked.batches | f"{name}Apply" >> beam.ParDo(
            ApplyRemovals(name, self._drop_document),
            by_record(entries, name),
            beam.pvalue.AsSingleton(wanted),
        ).with_outputs(DROPPED, THUMBS, main="docs")
        docs = applied.docs | f"{name}Strip" >> beam.Map(_without_embeddings)
        report = (
            batches.pipeline
            | f"{name}Finish" >> beam.Create([None])
            | f"{name}Report"
            >> beam.Map(
                _report,
                threshold=threshold,
                removed=beam.pvalue.AsSingleton(removed),
                largest=beam.pvalue.AsSingleton(largest),
                clusters=beam.pvalue.AsSingleton(sizes),
                thumbs=beam.pvalue.AsList(applied[THUMBS]),
            )
        )
        return {"docs": docs, "dropped": applied[DROPPED], "report": report}


def _report(_, threshold, removed, largest, clusters, thumbs) -> dict:
    """The stage's manifest report: the threshold and LSH shape, images
    removed, how many clusters, the largest (with thumbnails, the kept first)."""
    thumbnails = dict(thumbs)
    shown = []
    for size, label, members in sorted(largest, key=lambda c: (-c[0], c[1])):
        shown.append(
            {
                "size": size,
                "kept": {"record_id": label[0], "position": label[1]},
                "members": [
                    {
                        "record_id": m[0],
                        "position": m[1],
                        **(
                            {"url": thumbnails[m][0], "thumbnail": thumbnails[m][1]}
                            if m in thumbnails
                            else {}
                        ),
                    }
                    for m in members[:CLUSTER_MEMBERS]
                ],
            }
        )
    return {
        "clip_sim": threshold,
        "bands": rule.BANDS,
        "rows": rule.ROWS,
        "removed": {NEAR_DUPLICATE_IMAGE: removed} if removed else {},
        "clusters": clusters,
        "largest_clusters": shown,
    }


def clip_near_duplicates_step(stage, batches, build):
    """After the CLIP stage: images whose CLIP embeddings are within
    ``--near-dup-clip-sim`` of another's leave (``near_duplicate_image``)."""
    found = batches | stage.name >> ClipNearImages(
        stage.name,
        rule.clip_sim(build.settings),
        build.spec.drop_on_image_failure,
        output=build.settings.output,
    )
    build.dropped(stage.name, found["dropped"])
    build.report(stage.name, found["report"])
    return found["docs"]
