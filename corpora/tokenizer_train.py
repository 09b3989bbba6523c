"""Training a SentencePiece model on a corpus's text."""

from __future__ import annotations

import io
from typing import Iterable, Iterator


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
    from corpora.inputs import iter_lines

    for _, raw in iter_lines(stream, path):
        yield from texts_of_line(raw)
