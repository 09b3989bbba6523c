"""Endless, resumable sample streams over a build's shards.

A trainer counts steps, not epochs, so a stream never ends: it reads its
shards in a seeded order, then again in another seeded order, and so on
(resampling without replacement within each pass, so every shard is read
equally often). Samples go through a seeded shuffle buffer.

**Split by node and worker.** Every loader worker of every node is one
*consumer* (``rank * num_workers + worker`` of ``world_size * num_workers``),
and :func:`split_shards` gives each consumer its own shards: shard ``i`` goes
to consumer ``i mod C``. With fewer shards than consumers each shard is cut
into parts by sample number (sample ``j`` of a shard cut in ``k`` parts
belongs to part ``j mod k``), so consumers still never see the same sample:

    >>> shards = [Shard(f"s{i}.tar") for i in range(3)]
    >>> [(s.url, s.part, s.parts) for s in split_shards(shards, consumer=1, consumers=2)]
    [('s1.tar', 0, 1)]
    >>> [(s.url, s.part, s.parts) for s in split_shards(shards, consumer=0, consumers=4)]
    [('s0.tar', 0, 2), ('s1.tar', 1, 2)]

**Bad shards.** A shard that cannot be opened, is corrupt or truncated, or
(with ``verify``) does not match its manifest entry (its size, sha256 and
count: :func:`corpora.reader.verify_shard`, the check ``corpora stats``
makes) is skipped: one warning line per shard (logger ``trainer.data``) and
a count in ``counters``; the samples read intact before the damage are
kept. A pass in which no shard gives a sample raises :class:`DataError`
rather than spin.

**Resume.** :meth:`ShardStream.state_dict` is small (the pass, the shard and
sample reached, the shuffle generator's state and *references* to the
samples in the buffer); :meth:`ShardStream.load_state_dict` re-reads those
samples, so the resumed stream yields exactly what the original would have.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from corpora import reader

log = logging.getLogger("trainer.data")


class DataError(ValueError):
    """Data the loader cannot use: an unreadable build, a source with no readable sample."""


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard, or part ``part`` of ``parts`` of it (samples ``j`` with
    ``j mod parts == part``), and what its build's manifest says of it."""

    url: str
    samples: int | None = None
    sha256: str | None = None
    part: int = 0
    parts: int = 1
    size: int | None = None  # bytes

    @classmethod
    def of(cls, url: str, entry: dict[str, Any]) -> "Shard":
        """The shard at ``url`` with what its manifest ``entry`` says of it."""
        return cls(url, entry["samples"], entry["sha256"], size=entry.get("bytes"))

    @property
    def entry(self) -> dict[str, Any]:
        """What :func:`corpora.reader.verify_shard` checks: the manifest's say."""
        return {"samples": self.samples, "sha256": self.sha256, "bytes": self.size}


def split_shards(shards: Sequence[Shard], consumer: int, consumers: int) -> list[Shard]:
    """The shards (or shard parts) of one consumer of ``consumers``: disjoint
    across consumers, together every sample once."""
    if not 0 <= consumer < consumers:
        raise ValueError(f"consumer {consumer} of {consumers}")
    if not shards:
        return []
    parts = -(-consumers // len(shards))  # ceil: enough units for every consumer
    units = [
        dataclasses.replace(shard, part=part, parts=parts)
        for part in range(parts)
        for shard in shards
    ]
    return units[consumer::consumers]


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _seeded(seed: Sequence[int], *more: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([*seed, *more])))


class ShardStream:
    """The endless samples of a list of shards for one consumer.

    ``seed`` is a sequence of ints (the run's seed, the source, the consumer);
    ``shuffle_buffer`` samples are held and one drawn at random per step (0
    or 1: the shards' own order; never more than the shards hold, when their
    counts are known); ``check(sample)`` returns why a sample is
    unusable (counted in ``samples_skipped``), or None. Samples keep their
    images as encoded bytes: decoding is the batcher's work.
    """

    def __init__(
        self,
        shards: Sequence[Shard],
        *,
        seed: Sequence[int] = (0,),
        shuffle_buffer: int = 0,
        verify: bool = False,
        check: Callable[[reader.Sample], str | None] | None = None,
        name: str = "",
    ) -> None:
        if not shards:
            raise DataError(f"{name or 'stream'}: no shards to read")
        self.shards = list(shards)
        self.seed = tuple(int(s) for s in seed)
        known = [s.samples for s in self.shards]
        if all(n is not None for n in known):  # a buffer larger than the data would hold repeats
            held = sum((n - s.part + s.parts - 1) // s.parts for n, s in zip(known, self.shards))  # type: ignore[operator]
            shuffle_buffer = min(shuffle_buffer, held)
        self.buffer_size = int(shuffle_buffer)
        self.verify = verify
        self.check = check
        self.name = name
        self.counters = {"shards_skipped": 0, "samples_skipped": 0}
        self._pass = self._position = self._offset = self._read_in_pass = 0
        self._order = self._order_of(0)
        self._rng = _seeded(self.seed, 1)
        self._buffer: list[tuple[tuple[int, int], reader.Sample]] = []
        self._reader: Iterator[tuple[int, reader.Sample]] | None = None
        self._warned: set[str] = set()
        self._verified: dict[str, bool] = {}

    def _order_of(self, number: int) -> list[int]:
        return _seeded(self.seed, 0, number).permutation(len(self.shards)).tolist()

    # -- reading ---------------------------------------------------------------

    def _samples(self, shard: Shard, start: int) -> Iterator[tuple[int, reader.Sample]]:
        count = 0
        for number, sample in enumerate(reader.iter_samples(shard.url, decode_images=False)):
            count = number + 1
            if number >= start and number % shard.parts == shard.part:
                yield number, sample
        if shard.samples is not None and count != shard.samples:
            raise reader.ShardMismatch(f"{count} samples, the manifest says {shard.samples}")

    def _warn(self, url: str, message: str) -> None:
        if url not in self._warned:  # one line per shard, however often it comes round
            self._warned.add(url)
            log.warning("%sskipped %s: %s", f"{self.name}: " if self.name else "", url, message)

    def _skip_shard(self, shard: Shard, message: str) -> None:
        self.counters["shards_skipped"] += 1
        self._warn(shard.url, message)
        self._next_shard()

    def _next_shard(self) -> None:
        self._close_reader()
        self._position += 1
        self._offset = 0

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()  # type: ignore[attr-defined]
            self._reader = None

    def _verified_ok(self, shard: Shard) -> bool:
        if shard.url not in self._verified:
            try:
                reader.verify_shard(shard.url, shard.entry)  # as corpora stats checks it
                self._verified[shard.url] = True
            except Exception as exc:  # a mismatch, a truncated tar, an unreachable URL
                self._verified[shard.url] = False
                reason = _reason(exc).replace(f"{shard.url}: ", "")  # the line names it once
                self._warn(shard.url, f"does not match its manifest ({reason})")
        return self._verified[shard.url]

    def _read(self) -> tuple[tuple[int, int], reader.Sample]:
        """The next usable sample and its reference (shard index, sample number)."""
        while True:
            if self._position >= len(self._order):
                if self._read_in_pass == 0:
                    raise DataError(
                        f"{self.name or 'stream'}: none of its {len(self.shards)} shard(s) gave "
                        f"a usable sample ({self.counters['shards_skipped']} shard(s) skipped, "
                        f"{self.counters['samples_skipped']} sample(s))"
                    )
                self._pass += 1
                self._position = self._offset = self._read_in_pass = 0
                self._order = self._order_of(self._pass)
            index = self._order[self._position]
            shard = self.shards[index]
            if self._reader is None:
                if self.verify and not self._verified_ok(shard):
                    self.counters["shards_skipped"] += 1
                    self._next_shard()
                    continue
                self._reader = self._samples(shard, self._offset)
            try:
                number, sample = next(self._reader)
            except StopIteration:
                self._next_shard()
                continue
            except Exception as exc:  # unreachable, corrupt, truncated: never fatal, never silent
                self._skip_shard(shard, _reason(exc))
                continue
            self._offset = number + 1
            problem = self.check(sample) if self.check is not None else None
            if problem is not None:
                self.counters["samples_skipped"] += 1
                self._warn(shard.url, f"sample {sample.key}: {problem}")
                continue
            self._read_in_pass += 1
            return (index, number), sample

    def __iter__(self) -> "ShardStream":
        return self

    def __next__(self) -> reader.Sample:
        if self.buffer_size <= 1:
            return self._read()[1]
        while len(self._buffer) < self.buffer_size:
            self._buffer.append(self._read())
        pick = int(self._rng.integers(len(self._buffer)))
        _, sample = self._buffer[pick]
        self._buffer[pick] = self._read()
        return sample

    def close(self) -> None:
        self._close_reader()

    # -- resume ----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands: plain ints, lists and dicts (JSON-able)."""
        return {
            "pass": self._pass,
            "position": self._position,
            "offset": self._offset,
            "read_in_pass": self._read_in_pass,
            "rng": self._rng.bit_generator.state,
            "buffer": [list(ref) for ref, _ in self._buffer],
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the samples in its buffer are read again."""
        self._close_reader()
        self._pass = int(state["pass"])
        self._position = int(state["position"])
        self._offset = int(state["offset"])
        self._read_in_pass = int(state["read_in_pass"])
        self._order = self._order_of(self._pass)
        self._rng.bit_generator.state = state["rng"]
        self.counters = dict(state["counters"])
        self._buffer = self._reread([(int(i), int(n)) for i, n in state["buffer"]])

    def start_pass(self, number: int) -> None:
        """Start pass ``number`` afresh: its seeded shard order from the first shard, the
        shuffle buffer empty (a resume at another world size, whose streams cannot continue
        the saved ones)."""
        self._close_reader()
        self._pass = int(number)
        self._position = self._offset = self._read_in_pass = 0
        self._order = self._order_of(self._pass)
        self._buffer = []

    def _reread(self, refs: list[tuple[int, int]]) -> list[tuple[tuple[int, int], reader.Sample]]:
        wanted: dict[int, set[int]] = {}
        for index, number in refs:
            wanted.setdefault(index, set()).add(number)
        found: dict[tuple[int, int], reader.Sample] = {}
        for index, numbers in wanted.items():
            url = self.shards[index].url
            left = set(numbers)
            try:
                for number, sample in enumerate(reader.iter_samples(url, decode_images=False)):
                    if number in left:
                        found[(index, number)] = sample
                        left.discard(number)
                        if not left:
                            break
            except Exception as exc:
                self._warn(url, f"cannot re-read the shuffle buffer's samples ({_reason(exc)})")
        return [(ref, found[ref]) for ref in refs if ref in found]
