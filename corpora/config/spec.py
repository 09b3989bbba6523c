"""What describes a corpus: one :class:`CorpusSpec`, next to its source reader.

A spec ties a corpus name to everything that differs between corpora: how an
input file is read (``read``), the file patterns a directory input matches,
the corpus's options (:class:`Option`: name, type, default, what the settings
keep), the metadata filter that runs before any download, the layout that runs
after the images are fetched, how CLIP applies, and what ranks it for a top
fraction. The CLI's flags, :func:`corpora.config.settings.corpus_settings` and the
Beam pipeline all read the spec; nothing else names a corpus.

Specs live in the ``SPECS`` tuple of a module of ``corpora/sources/`` (or of a
package named in ``CORPORA_SOURCES``, see :mod:`corpora.config.catalog`)::

    SPECS = (
        CorpusSpec(
            name="toy",
            summary="one text record per line",
            unit="document",
            read=read,
            input_patterns=("*.txt",),
            options=(Option("lowercase", bool, False, "lower-case every line"),),
        ),
    )

``read(stream, path, settings)`` yields the corpus's records (and drops with
reasons) from one input file; every record it yields is one unit of the
funnel. Stages after it keep, change or drop records one for one.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator, Mapping, Union

from corpora.record import Document, Drop

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings

Reader = Callable[[BinaryIO, str, "BuildSettings"], Iterator[Union[Document, Drop]]]
# (raw line, path, line number, settings) -> record or Drop: one line of a
# line-oriented corpus, parsed where a worker takes it (corpora.sources.inputs.iter_lines
# gives the lines: bytes, or a LongLine past settings.max_line_bytes)
LineParser = Callable[[Any, str, int, "BuildSettings"], Union[Document, Drop]]
Stage = Callable[[Document, "BuildSettings"], Union[Document, Drop]]

# How the CLIP stage applies to a corpus: a pair record (one image, one text)
# gets one score; a document's images are scored against every sentence and
# re-placed (corpora.clip). A corpus without either is not scored.
CLIP_PAIRS = "pairs"
CLIP_DOCUMENTS = "documents"
CLIP_USES = (CLIP_PAIRS, CLIP_DOCUMENTS)
OPTION_TYPES = (bool, int, float, str, tuple)
# The option a spec with ``rank`` must have: the fraction of the ranked records kept.
TOP_FRACTION = "top_fraction"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a corpus: a key of ``BuildSettings.corpus_options`` and the
    ``corpora build`` flag ``--name-with-dashes``.

    ``type`` is ``bool`` (a flag), ``int``, ``float``, ``str`` or ``tuple`` (of
    strings; comma-separated on the command line). ``check`` returns a one-line
    complaint about a value, or ``None``; ``store`` turns a value into what the
    settings keep (``0`` into ``None`` where 0 means off).

    >>> option = Option("max_images", int, 6, "at most this many images", store=zero_is_off)
    >>> option.flag, option.value(None), option.value(0), option.value(3)
    ('--max-images', 6, None, 3)
    >>> Option("languages", tuple, None, "languages to keep").value("en, de")
    ('en', 'de')
    >>> Option("caption", str, "ref", "which caption", choices=("ref", "alt")).value("x")
    Traceback (most recent call last):
    ...
    ValueError: unknown --caption 'x'; one of: ref, alt
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None
    store: Callable[[Any], Any] | None = None
    # A tuple option given once per value (``--decontaminate A --decontaminate B``),
    # each value whole (a path may hold a comma), rather than comma-separated.
    repeatable: bool = False

    def __post_init__(self) -> None:
        if self.type not in OPTION_TYPES:
            raise TypeError(f"option {self.name}: type must be one of {OPTION_TYPES}")
        if self.repeatable and self.type is not tuple:
            raise TypeError(f"option {self.name}: only a tuple option is repeatable")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def value(self, given: Any) -> Any:
        """What the settings keep when the user gives ``given`` (``None``: not given)."""
        value = self.default if given is None else self._coerce(given)
        if value is None:
            return None
        if self.choices and value not in self.choices:
            raise ValueError(f"unknown {self.flag} {value!r}; one of: {', '.join(self.choices)}")
        complaint = self.check(value) if self.check is not None else None
        if complaint:
            raise ValueError(complaint)
        return self.store(value) if self.store is not None else value

    def _coerce(self, given: Any) -> Any:
        if self.type is tuple:
            if isinstance(given, str):
                given = (given,) if self.repeatable else given.split(",")
            return tuple(str(part).strip() for part in given)
        if self.type is bool:
            return bool(given)
        try:
            return self.type(given)
        except (TypeError, ValueError):
            raise ValueError(
                f"{self.flag} takes {'an integer' if self.type is int else 'a number'}, "
                f"got {given!r}"
            ) from None


def zero_is_off(value: Any) -> Any:
    """A ``store`` for ``Option``: 0 means the option is off (``None``)."""
    return value or None


def in_range(
    flag: str, low: float | None, high: float | None, what: str, low_open: bool = False
) -> Callable[[Any], str | None]:
    """A ``check`` for ``Option``: ``low <= value <= high`` (``None``: no bound),
    else ``"{flag} {what}; got {value}"``.

    >>> in_range("--max-nsfw", 0, 1, "is a probability, 0..1")(1.5)
    '--max-nsfw is a probability, 0..1; got 1.5'
    """
    return _InRange(flag, low, high, what, low_open)


@dataclasses.dataclass(frozen=True)
class _InRange:
    flag: str
    low: float | None
    high: float | None
    what: str
    low_open: bool

    def __call__(self, value: Any) -> str | None:
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and value > self.high
        return f"{self.flag} {self.what}; got {value}" if below or above else None


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    """Everything that makes one corpus different from the others (module doc)."""

    name: str
    summary: str  # one line, for `corpora list`
    unit: str  # what the funnel counts: "pair", "document", …
    read: Reader
    input_patterns: tuple[str, ...]  # what a directory input matches
    # A line-oriented corpus's parser of one line, the parse that ``read`` does
    # line by line: with it, a text build's reader hands raw lines to the
    # workers, which parse them (pipelines.transforms.ParseLines).
    parse_line: LineParser | None = None
    options: tuple[Option, ...] = ()
    # Before any download: (record, settings) -> record or Drop (corpora.sources.filters).
    metadata_filter: Stage | None = None
    # After fetching (and CLIP): (record, settings) -> record or Drop (sources/mmc4/layouts.py).
    layout: Stage | None = None
    # Whether records carry images to fetch; a text corpus (False) runs no
    # image stage at all: no spread into batches, no fetch, no attach.
    images: bool = True
    # A record whose image cannot be fetched is dropped (pairs), rather than
    # losing just that image (interleaved documents).
    drop_on_image_failure: bool = True
    # (stream, path, settings) -> None, raising corpora.sources.inputs.InputError for a file
    # that cannot be this corpus (a parquet without a required column); run on
    # every input before the build starts.
    check_input: Callable[[BinaryIO, str, "BuildSettings"], None] | None = None
    clip: str | None = None  # CLIP_PAIRS, CLIP_DOCUMENTS, or None: not scored
    # The score that ranks a record for the option ``top_fraction`` (a global
    # cut, before any download); None: the corpus has no such ranking.
    rank: Callable[[Document], float | None] | None = None
    # Writes the bundled sample in this corpus's format into a directory and
    # returns the input path: the input of a build given none.
    sample: Callable[[str], str] | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.unit:
            raise ValueError(f"corpus {self.name!r}: a spec needs a name and a unit")
        if not self.images and self.clip is not None:
            raise ValueError(f"corpus {self.name}: a corpus without images cannot use CLIP")
        if self.clip is not None and self.clip not in CLIP_USES:
            raise ValueError(f"corpus {self.name}: clip must be one of {CLIP_USES} or None")
        names = [option.name for option in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"corpus {self.name}: an option is declared twice: {names}")
        if (self.rank is not None) != (TOP_FRACTION in names):
            raise ValueError(f"corpus {self.name}: rank and the option {TOP_FRACTION} go together")

    def option(self, name: str) -> Option | None:
        return next((option for option in self.options if option.name == name), None)

    def corpus_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every option's stored value, in the spec's order (``given`` may leave
        options out, or give ``None``: their defaults)."""
        unknown = sorted(set(given) - {option.name for option in self.options})
        if unknown:
            raise ValueError(
                f"{self.name} has no option {unknown[0]!r}"
                + (
                    f"; its options: {', '.join(o.name for o in self.options)}"
                    if self.options
                    else ""
                )
            )
        return {option.name: option.value(given.get(option.name)) for option in self.options}

    def top_fraction(self, settings: "BuildSettings") -> float | None:
        """The fraction of ranked records a build keeps (``None``: no cut)."""
        if self.rank is None:
            return None
        return settings.corpus_options.get(TOP_FRACTION)
