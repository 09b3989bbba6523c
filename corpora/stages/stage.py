"""A stage of a build: one object that says everything the build needs of it.

A build is an ordered list of stages (:data:`corpora.stages.STAGES`). Each
stage names its pure core function (``core``, or ``spec_core``: the field of
the corpus's spec that holds it) or, for a stage that sees more than one
record at a time (a global selection, the fetch, packing), the Beam wrapper
that runs it (``beam``, ``"module:function"``, resolved only by
:mod:`pipelines.stages`: the core never imports Beam). Its options become
flags of ``corpora build`` and ``corpora fetch``; their values are in
``settings.stage_options``. Every drop it makes carries one of its
``reasons`` and is counted under its name.

A stage whose core takes one record at a time needs no Beam code: the
generic wrapper runs the core on each batch and routes its drops::

    >>> import re
    >>> from corpora.config.spec import Option
    >>> from corpora.record import Document, Drop, TextChunk
    >>> def drop_matching(doc, settings):
    ...     pattern = settings.stage_options["drop_matching"]
    ...     if any(re.search(pattern, chunk.text) for chunk in doc.texts):
    ...         return Drop("text_matches_pattern", doc.id)
    ...     return doc
    >>> stage = Stage(
    ...     "regex", "drop records whose text matches a pattern", core=drop_matching,
    ...     options=(Option("drop_matching", str, None, "a regular expression"),),
    ...     reasons=("text_matches_pattern",), after="filter",
    ...     applies=lambda spec, settings: settings.stage_options.get("drop_matching") is not None)
    >>> stage.option_names, stage.reasons
    (('drop_matching',), ('text_matches_pattern',))
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Iterable, Union

from corpora.config.spec import Option
from corpora.record import Document, Drop

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings
    from corpora.config.spec import CorpusSpec

Core = Callable[[Document, "BuildSettings"], Union[Document, Drop, Iterable[Union[Document, Drop]]]]
Applies = Callable[["CorpusSpec", "BuildSettings"], bool]
Check = Callable[["BuildSettings"], None]


class StageError(ValueError):
    """A stage list that cannot make a build (one line)."""


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step of a build (module doc)."""

    name: str  # its counters' namespace and its entry in the manifest's ``stages``
    summary: str  # one line: docs/architecture.md and ``corpora build --help``
    core: Core | None = None  # a per-record pure function, run by the generic wrapper
    spec_core: str | None = None  # or the CorpusSpec field holding the core (a corpus's own)
    beam: str | None = None  # "module:function": the Beam wrapper of a stage the generic cannot run
    options: tuple[Option, ...] = ()  # flags of corpora build and corpora fetch
    reasons: tuple[str, ...] = ()  # the drop reasons it gives
    applies: Applies | None = None  # None: whenever it has a core
    after: str | None = None  # a plugin stage's place: after the stage of this name
    # raises ValueError (one line) when the settings contradict the stage's options
    check: Check | None = None

    def __post_init__(self) -> None:
        ways = [self.core is not None, self.spec_core is not None, self.beam is not None]
        if sum(ways) != 1:
            raise StageError(f"stage {self.name!r}: give exactly one of core, spec_core and beam")
        if self.beam is not None and ":" not in self.beam:
            raise StageError(f"stage {self.name!r}: beam is 'module:function', got {self.beam!r}")

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(option.name for option in self.options)

    def core_for(self, spec: "CorpusSpec") -> Core | None:
        """The per-record function this stage runs for ``spec`` (``None``: none,
        or the stage has a Beam wrapper of its own)."""
        if self.spec_core is not None:
            return getattr(spec, self.spec_core)
        return self.core

    def runs(self, spec: "CorpusSpec", settings: "BuildSettings") -> bool:
        """Whether a build of ``spec`` with ``settings`` runs this stage."""
        if self.applies is not None:
            return bool(self.applies(spec, settings))
        return self.beam is not None or self.core_for(spec) is not None
