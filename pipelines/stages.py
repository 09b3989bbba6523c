"""The stage list (:mod:`corpora.stages`) as a Beam pipeline: each stage's
wrapper applied in order, and what they leave for the manifest.

A stage with a per-record core runs through :func:`apply_core` (the core on
each batch, drops routed and counted under the stage's name); a stage with a
``beam`` wrapper names a function ``step(stage, batches, build)`` that takes
the batches and returns the batches kept. A wrapper reports through the
:class:`Steps` it is handed: its drops (:meth:`Steps.dropped`), a summary for
its manifest entry (:meth:`Steps.report`), images it took out of kept
documents (:meth:`Steps.images_removed`) and named outputs other steps or the
manifest read (``build.outputs``).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Iterable, Iterator

import apache_beam as beam

from corpora.config.settings import BuildSettings
from corpora.config.spec import CorpusSpec
from corpora.record import Document, Drop
from corpora.stages import Stage
from corpora.tokens.tokenizer import Tokenizer
from pipelines.transforms import DROPPED, route_batch

Step = Callable[[Stage, Any, "Steps"], Any]


@dataclasses.dataclass
class Steps:
    """One pipeline's stages as they are applied: what each leaves behind."""

    pipeline: beam.Pipeline
    settings: BuildSettings
    spec: CorpusSpec
    tokenizer: Tokenizer | None = None
    progress: str | None = None  # the local build's progress folder, if any
    purpose: str = "build"  # or "fetch": ``corpora fetch``, the download alone
    drops: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    reports: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    removed: list[Any] = dataclasses.field(default_factory=list)
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    names: tuple[str, ...] = ()  # the stages being applied, in order (run_stages sets it)

    def dropped(self, stage: str, drops) -> None:
        """``drops`` (a PCollection of :class:`~corpora.record.Drop`) are the stage's."""
        self.drops.append((stage, drops))

    def report(self, stage: str, summary) -> None:
        """``summary``, a PCollection of one dict, is the stage's manifest report."""
        self.reports.append((stage, summary))

    def images_removed(self, counts) -> None:
        """``(reason, n)`` pairs: images taken out of documents that are kept."""
        self.removed.append(counts)


def wrapper(stage: Stage) -> Step:
    """The function that applies ``stage`` to a pipeline."""
    if stage.beam is None:
        return apply_core
    module, _, name = stage.beam.partition(":")
    return getattr(importlib.import_module(module), name)


def run_stages(stages: Iterable[Stage], build: Steps):
    """Apply ``stages`` in order (the first, ``read``, takes no batches);
    returns what the last one returns."""
    stages = tuple(stages)
    build.names = tuple(stage.name for stage in stages)
    batches = None
    for stage in stages:
        batches = wrapper(stage)(stage, batches, build)
    return batches


def label(stage: Stage) -> str:
    """A stage's Beam label: ``filter`` → ``Filter``."""
    return "".join(part.capitalize() for part in stage.name.replace("-", "_").split("_"))


def apply_core(stage: Stage, batches, build: Steps):
    """The generic wrapper: the stage's core on every record of every batch."""
    core = stage.core_for(build.spec)
    out = batches | label(stage) >> beam.ParDo(
        ApplyStage(core, build.settings, stage.name)
    ).with_outputs(DROPPED, main="docs")
    build.dropped(stage.name, out[DROPPED])
    return out.docs


def core_results(core, batch: list[Document], settings: BuildSettings) -> Iterator:
    """Each record's results: a record, a :class:`Drop`, or an iterable of them."""
    for doc in batch:
        result = core(doc, settings)
        if isinstance(result, (Document, Drop)):
            yield result
        else:
            yield from result


class ApplyStage(beam.DoFn):
    """A per-record core stage, ``(record, settings) -> record, Drop or an
    iterable of them``, on a batch of records: a corpus's metadata filter
    (before fetch), its layout (after fetch), any stage of the list with a
    ``core``. Emits the records kept as one batch, and the drops."""

    def __init__(self, core, settings: BuildSettings, name: str):
        self._core = core
        self._settings = settings
        self._name = name

    def process(self, batch: list[Document]) -> Iterator:
        yield from route_batch(core_results(self._core, batch, self._settings), self._name)
