"""The CLIP stage in Beam: RunInference with a custom model handler.

RunInference fits this stage: it batches elements, loads the model once per
worker process in ``setup`` and shares it across the worker's threads
(``shared.Shared``), and counts inference time. The handler only loads the
model and calls :func:`corpora.clip.score_pairs` (pairs, :class:`ClipStage`)
or :func:`corpora.clip.score_documents` (``mmc4`` documents,
:class:`DocumentClipStage`); batches are fixed at the model's batch size so
padding is needed only at a bundle's end.

Two things are done by hand: the device (``auto`` resolves through
``torch.cuda.is_available()``, because RunInference's ``device='GPU'`` falls
back to the CPU silently), and what crosses process boundaries (documents,
drops and float32 numpy embeddings, never tensors).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler, RunInference

from corpora import clip
from corpora.config.spec import CLIP_DOCUMENTS
from corpora.dedup.embeddings import clip_sim, with_embeddings
from corpora.record import Document, Drop, stable_hash
from corpora.stages import selection
from pipelines import storage
from pipelines.selection import AtLeast, HistogramFn, TopFraction
from pipelines.transforms import DROPPED, NAMESPACE, record_batches, route_result

EMBEDDINGS = "embeddings"


def clip_score(doc: Document) -> float | None:
    """The computed CLIP score of a pair record (``None`` when it has none)."""
    images = doc.images
    return images[0].scores.get(clip.SCORE) if len(images) == 1 else None


class ClipModelHandler(ModelHandler):
    """Loads the open_clip model once per worker; scores a batch of pair records."""

    def __init__(self, settings: clip.ClipSettings, keep_embeddings: bool = False):
        super().__init__(min_batch_size=settings.batch_size, max_batch_size=settings.batch_size)
        self._settings = settings
        self._keep_embeddings = keep_embeddings  # documents: in each image's meta

    def load_model(self) -> clip.ClipModel:
        return clip.load_clip(self._settings)

    def run_inference(
        self,
        batch: Sequence[Document],
        model: clip.ClipModel,
        inference_args: dict[str, Any] | None = None,
    ):
        return clip.score_pairs(batch, model)

    def get_num_bytes(self, batch: Sequence[Document]) -> int:
        # The default pickles the whole batch (images included) just to measure it.
        return sum(len(img.data or b"") for doc in batch for img in doc.images)

    def get_metrics_namespace(self) -> str:
        return f"{NAMESPACE}.clip"


class DocumentClipModelHandler(ClipModelHandler):
    """The same handler for interleaved documents: each batch of documents is
    scored and its images re-placed by :func:`corpora.clip.score_documents`."""

    def run_inference(
        self,
        batch: Sequence[Document],
        model: clip.ClipModel,
        inference_args: dict[str, Any] | None = None,
    ):
        return clip.score_documents(batch, model, self._keep_embeddings)


def image_scores(doc: Document) -> list[float]:
    """The computed CLIP scores of a document's images."""
    return [image.scores[clip.SCORE] for image in doc.images if clip.SCORE in image.scores]


class _RouteScored(beam.DoFn):
    def process(self, outcome: Document | Drop):
        if not isinstance(outcome, Drop):
            Metrics.counter(NAMESPACE, "clip.images_scored").inc(len(image_scores(outcome)))
        yield route_result(outcome, "clip")


class _SplitScored(beam.DoFn):
    def __init__(self, save_embeddings: bool, keep_embeddings: bool = False):
        self._save = save_embeddings
        self._keep = keep_embeddings

    def process(self, outcome: clip.ScoredPair | Drop):
        if isinstance(outcome, Drop):
            yield route_result(outcome, "clip")
            return
        Metrics.counter(NAMESPACE, "clip.scored").inc()
        if self._save:
            yield beam.pvalue.TaggedOutput(EMBEDDINGS, clip.embedding_row(outcome))
        if self._keep:  # for --near-dup-clip-sim, which takes it out again
            yield with_embeddings(outcome.doc, {0: outcome.image_embedding})
        else:
            yield outcome.doc


class _WriteEmbeddingFile(beam.DoFn):
    def __init__(self, output: str, model_id: str):
        self._output = output
        self._model_id = model_id

    def process(self, element):
        index, rows = element
        name = clip.embeddings_file_name(index)
        with storage.create_atomically(FileSystems.join(self._output, name)) as stream:
            info = clip.write_embeddings(stream, list(rows), self._model_id)
        yield {"path": name, **info}


class WriteEmbeddings(beam.PTransform):
    """Embedding rows → parquet files beside the shards, split by id hash."""

    def __init__(
        self, output: str, model_id: str, rows_per_file: int = clip.EMBEDDINGS_ROWS_PER_FILE
    ):
        super().__init__()
        self._output = output
        self._model_id = model_id
        self._rows_per_file = rows_per_file

    def expand(self, rows):
        per_file = self._rows_per_file
        total = rows | "CountRows" >> beam.combiners.Count.Globally()
        return (
            rows
            | "PickFile"
            >> beam.Map(
                lambda row, n: (
                    stable_hash(row["id"]) % clip.embeddings_file_count(n, per_file),
                    row,
                ),
                beam.pvalue.AsSingleton(total),
            )
            | "ByFile" >> beam.GroupByKey()
            | "WriteFile" >> beam.ParDo(_WriteEmbeddingFile(self._output, self._model_id))
        )


class ClipOutput(NamedTuple):
    docs: beam.PCollection
    dropped: beam.PCollection
    summary: beam.PCollection  # one dict: the manifest's ``clip`` entry


class ClipStage(beam.PTransform):
    """Score pair records, then apply ``min_sim`` and ``top_fraction``.

    Sits after fetch (it needs the image bytes) and before tokenize.
    """

    def __init__(
        self,
        settings: clip.ClipSettings,
        output: str,
        resolution: float = selection.RESOLUTION,
        rows_per_file: int = clip.EMBEDDINGS_ROWS_PER_FILE,
        keep_embeddings: bool = False,
    ):
        super().__init__()
        self._settings = settings
        self._output = output
        self._resolution = resolution
        self._rows_per_file = rows_per_file
        self._keep_embeddings = keep_embeddings

    def expand(self, docs: beam.PCollection) -> ClipOutput:
        settings, resolution = self._settings, self._resolution
        scored = (
            docs
            | "RunInference" >> RunInference(ClipModelHandler(settings))
            | "SplitScored"
            >> beam.ParDo(
                _SplitScored(settings.save_embeddings, self._keep_embeddings)
            ).with_outputs(DROPPED, EMBEDDINGS, main="docs")
        )
        counts = (
            scored.docs
            | "ScoreBucket" >> beam.Map(lambda doc: selection.bucket(clip_score(doc), resolution))
            | "ScoreHistogram" >> beam.CombineGlobally(HistogramFn())
        )
        kept, drops = scored.docs, [scored[DROPPED]]
        if settings.min_sim is not None:
            kept, below = kept | "MinClipSim" >> AtLeast(
                clip_score, settings.min_sim, "clip_similarity_below_min"
            )
            drops.append(below)
        top_fraction = docs.pipeline | "NoSelection" >> beam.Create([])
        if settings.top_fraction is not None:
            selected = kept | "ClipTopFraction" >> TopFraction(
                clip_score, settings.top_fraction, "clip_below_top_fraction", resolution
            )
            kept, top_fraction = selected.kept, selected.summary
            drops.append(selected.dropped)
        files = docs.pipeline | "NoEmbeddings" >> beam.Create([])
        if settings.save_embeddings:
            files = scored[EMBEDDINGS] | "SaveEmbeddings" >> WriteEmbeddings(
                self._output, settings.model_id, self._rows_per_file
            )
        summary = (
            docs.pipeline
            | "ClipSummaryStart" >> beam.Create([None])
            | "ClipSummary"
            >> beam.Map(
                lambda _, counts, top, files: clip.clip_summary(
                    settings, counts, top[0] if top else None, files, resolution
                ),
                beam.pvalue.AsSingleton(counts),
                beam.pvalue.AsList(top_fraction),
                beam.pvalue.AsList(files),
            )
        )
        dropped = drops | "ClipDropped" >> beam.Flatten()
        return ClipOutput(kept, dropped, summary)


class DocumentClipStage(beam.PTransform):
    """Score interleaved documents (``mmc4``, ``mmc4-reordered``): re-place
    their images by the computed matrix, then remove images below ``min_sim``.

    Sits after fetch and before the layout, which drops a document left
    without images. The manifest's ``clip`` entry counts images.
    """

    def __init__(
        self,
        settings: clip.ClipSettings,
        resolution: float = selection.RESOLUTION,
        keep_embeddings: bool = False,
    ):
        super().__init__()
        if settings.top_fraction is not None or settings.save_embeddings:
            raise ValueError("documents take neither a CLIP top fraction nor saved embeddings")
        self._settings = settings
        self._resolution = resolution
        self._keep_embeddings = keep_embeddings

    def expand(self, docs: beam.PCollection) -> ClipOutput:
        settings, resolution = self._settings, self._resolution
        scored = (
            docs
            | "RunInference"
            >> RunInference(DocumentClipModelHandler(settings, self._keep_embeddings))
            | "RouteScored" >> beam.ParDo(_RouteScored()).with_outputs(DROPPED, main="docs")
        )
        counts = (
            scored.docs
            | "ScoreBuckets"
            >> beam.FlatMap(
                lambda doc: [selection.bucket(s, resolution) for s in image_scores(doc)]
            )
            | "ScoreHistogram" >> beam.CombineGlobally(HistogramFn())
        )
        kept = scored.docs
        if settings.min_sim is not None:
            kept = kept | "MinClipSim" >> beam.Map(clip.remove_images_below, settings.min_sim)
        summary = (
            docs.pipeline
            | "ClipSummaryStart" >> beam.Create([None])
            | "ClipSummary"
            >> beam.Map(
                lambda _, counts: clip.clip_summary(settings, counts, None, [], resolution),
                beam.pvalue.AsSingleton(counts),
            )
        )
        return ClipOutput(kept, scored[DROPPED], summary)


def clip_step(stage, batches, build):
    """``clip``: pairs scored (minimum, top fraction, embeddings) or a
    document's images re-placed and filtered, one record at a time; the
    manifest's ``clip`` entry is ``build.outputs["clip"]``."""
    settings = build.settings
    keep = clip_sim(settings) is not None  # the next stage compares the image embeddings
    scorer = (
        DocumentClipStage(settings.clip, keep_embeddings=keep)
        if build.spec.clip == CLIP_DOCUMENTS
        else ClipStage(settings.clip, settings.output, keep_embeddings=keep)
    )
    scored = (batches | "UnbatchToScore" >> beam.FlatMap(lambda batch: batch)) | "Clip" >> scorer
    build.dropped(stage.name, scored.dropped)
    build.outputs["clip"] = scored.summary
    return scored.docs | "RebatchScored" >> record_batches()
