"""Training a SentencePiece model on a corpus's text."""

from __future__ import annotations

import io
import os
from typing import Any, Callable, Iterable, Iterator, Sequence

from corpora.sources.inputs import InputError, LongLine, iter_lines

MODEL_TYPES = ("unigram", "bpe")


class TrainingError(ValueError):
    """SentencePiece refused to train (no text, a vocabulary too small for the
    characters, …); the message is one line for the user."""


def train_sentencepiece(
    texts: Iterable[str],
    output: str,
    vocab_size: int,
    model_type: str = "unigram",
    byte_fallback: bool = True,
    character_coverage: float = 0.9995,
    seed_sentencepiece_size: int = 1_000_000,
    input_sentence_size: int = 10_000_000,
) -> str:
    """Train a model on ``texts`` and write it to ``output`` (a ``.model`` file).

    The ids follow the Llama/T5 convention: ``<unk>``=0, ``<s>``=1, ``</s>``=2,
    and no dedicated pad piece (the build pads with ``pad_id``, 0 by default,
    and ``segment_ids`` 0 marks padding). Byte fallback keeps every string
    encodable without ``<unk>``.
    """
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=(t for t in texts if t and t.strip()),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        byte_fallback=byte_fallback,
        character_coverage=character_coverage,
        hard_vocab_limit=False,
        seed_sentencepiece_size=seed_sentencepiece_size,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=False,
        num_threads=1,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    with open(output, "wb") as handle:
        handle.write(model.getvalue())
    return output


def texts_of_line(raw: bytes) -> list[str]:
    """The training text in one line of a corpus file.

    A JSON object gives its ``text`` (C4) or ``text_list`` (MMC4) or
    ``caption_reference_description``/``caption_alt_text_description`` (WIT
    as JSON); any other line (plain text) is taken as it is.

    >>> texts_of_line(b'{"text": "a b", "url": "u"}'), texts_of_line(b'{"text_list": ["x.", "y."]}')
    (['a b'], ['x.', 'y.'])
    >>> texts_of_line(b"just a sentence")
    ['just a sentence']
    """
    import json

    line = raw.decode("utf-8", errors="replace").strip()
    if not line:
        return []
    if line.startswith("{"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            return [line]
        if isinstance(row, dict):
            texts = []
            for field in ("text", "caption_reference_description", "caption_alt_text_description"):
                if isinstance(row.get(field), str):
                    texts.append(row[field])
            if isinstance(row.get("text_list"), list):
                texts += [t for t in row["text_list"] if isinstance(t, str)]
            return texts
    return [line]


def iter_corpus_text(stream, path: str) -> Iterator[str]:
    """The training texts of one (possibly compressed) corpus file."""
    for _, raw in iter_lines(stream, path):
        if not isinstance(raw, LongLine):  # a line over the cap is never loaded
            yield from texts_of_line(raw)


def match_corpus_files(inputs: Sequence[str]) -> list[Any]:
    """The files (fsspec ``OpenFile``s) that ``inputs`` name: files, globs,
    directories (every file in them) or URIs; raises
    :class:`~corpora.sources.inputs.InputError` for an input that matches nothing."""
    import fsspec

    files = []
    for given in inputs:
        pattern = os.path.join(given, "*") if os.path.isdir(given) else given
        try:
            matched = [f for f in fsspec.open_files(pattern, "rb") if f.fs.isfile(f.path)]
        except Exception as exc:
            raise InputError(f"cannot read input {given}: {str(exc).splitlines()[0]}") from None
        if not matched:
            raise InputError(f"input not found: {given}")
        files += matched
    return files


def train_on_files(
    files: Sequence[Any],
    output: str,
    vocab_size: int,
    model_type: str = "unigram",
    max_sentences: int = 10_000_000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Train on the text of ``files`` (from :func:`match_corpus_files`) and write
    ``output``; returns the number of texts read. ``progress`` is called with
    the count every 100,000 texts."""
    counted = 0

    def texts() -> Iterator[str]:
        nonlocal counted
        for opened in files:
            with opened as stream:
                for text in iter_corpus_text(stream, opened.path):
                    counted += 1
                    if progress is not None and counted % 100_000 == 0:
                        progress(counted)
                    yield text

    try:
        train_sentencepiece(
            texts(), output, vocab_size, model_type=model_type, input_sentence_size=max_sentences
        )
    except RuntimeError as exc:  # SentencePiece refuses: no text, vocab too small, ...
        if counted == 0:
            raise TrainingError("no text found in the inputs") from None
        reason = str(exc).strip().splitlines()[-1].rpartition("] ")[2]
        raise TrainingError(f"training failed: {reason}") from None
    except OSError as exc:
        raise TrainingError(f"cannot read or write: {exc}") from None
    return counted
