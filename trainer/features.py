"""The objectives' features: pure numpy functions of a packed sample.

Shards are objective-agnostic (``docs/shard-format.md``): a packed sample is
``input_ids``, ``segment_ids`` (1, 2, … per packed document, 0 for padding)
and ``positions``. This module derives what each objective trains on. Every
function takes ``[L]`` arrays or ``[B, L]`` batches and returns arrays of the
same static length, so a batch never changes shape.

The example used throughout: ``seq_len`` 16, ``pad_id`` 0, ``image_token_id``
1000 with 3 slots per image, and two packed documents, A with an image
(``[bos, image × 3, 17, 18, eos]``) and B text only (``[bos, 25, 26, 27, eos]``):

    >>> import numpy as np
    >>> input_ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> segment_ids = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])

**VILA** (decoder-only) trains on the next text token, with attention causal
within each document and never across documents:

    >>> vila_features(input_ids, segment_ids, image_token_id=1000)["labels"].tolist()
    [-100, -100, -100, 17, 18, 2, -100, 25, 26, 27, 2, -100, -100, -100, -100, -100]

**PrefixLM** (SimVLM) sends each document's prefix (all its image slots and a
leading span of its text) to the encoder and the rest to the decoder; see
:func:`prefixlm_features`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

IGNORE = -100  # the label of a position without loss (PyTorch's cross-entropy ignore_index)


def document_runs(segment_ids: np.ndarray) -> list[tuple[int, int, int]]:
    """The packed documents of one ``[L]`` row: ``(segment, start, end)`` per
    run of equal non-zero segment ids, in order.

    >>> document_runs(np.array([1, 1, 1, 2, 2, 0, 0]))
    [(1, 0, 3), (2, 3, 5)]
    """
    segment_ids = np.asarray(segment_ids)
    if segment_ids.size == 0:
        return []
    starts = np.flatnonzero(np.diff(segment_ids, prepend=segment_ids[0] - 1) != 0)
    ends = np.append(starts[1:], segment_ids.size)
    return [
        (int(segment_ids[s]), int(s), int(e)) for s, e in zip(starts, ends) if segment_ids[s] != 0
    ]


def document_positions(segment_ids: np.ndarray) -> np.ndarray:
    """Positions restarting at 0 for every packed document, 0 on padding: the
    ``position_ids`` that variable-length attention kernels take instead of a mask.

    >>> document_positions(np.array([1, 1, 1, 2, 2, 0, 0])).tolist()
    [0, 1, 2, 0, 1, 0, 0]
    >>> document_positions(np.array([[1, 1, 2], [1, 0, 0]])).tolist()
    [[0, 1, 0], [0, 0, 0]]
    """
    segment_ids = np.asarray(segment_ids)
    length = segment_ids.shape[-1]
    flat = segment_ids.reshape(-1, length)
    index = np.arange(length)
    # The start of the current run, carried forward: a position is its distance from it.
    changed = np.ones_like(flat, dtype=bool)
    changed[:, 1:] = flat[:, 1:] != flat[:, :-1]
    run_start = np.maximum.accumulate(np.where(changed, index, 0), axis=1)
    positions = np.where(flat != 0, index - run_start, 0)
    return positions.reshape(segment_ids.shape).astype(np.int64)


def vila_labels(
    input_ids: np.ndarray, segment_ids: np.ndarray, image_token_id: int | None
) -> np.ndarray:
    """Next-token labels for a decoder-only model (VILA, LLaVA): ``labels[t]``
    is the token at ``t + 1`` when it is a text token of the same document,
    else ``IGNORE`` (-100): where the next token is an image slot, padding, or
    belongs to the next packed document. The output at position ``t`` is
    trained on ``labels[t]`` directly; the labels are already shifted.

    The last slot of an image predicts the first text token after the image
    (the caption's first word is trained given the image), as in LLaVA.

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    >>> vila_labels(ids, seg, image_token_id=1000).tolist()
    [-100, -100, -100, 17, 18, 2, -100, 25, 26, 27, 2, -100, -100, -100, -100, -100]
    """
    input_ids = np.asarray(input_ids)
    segment_ids = np.asarray(segment_ids)
    next_ids = np.roll(input_ids, -1, axis=-1)
    next_segments = np.roll(segment_ids, -1, axis=-1)
    next_segments[..., -1] = 0  # nothing follows the last position
    valid = (segment_ids != 0) & (next_segments == segment_ids)
    if image_token_id is not None:
        valid &= next_ids != image_token_id
    return np.where(valid, next_ids, IGNORE).astype(np.int64)


def vila_features(
    input_ids: np.ndarray, segment_ids: np.ndarray, image_token_id: int | None
) -> dict[str, np.ndarray]:
    """VILA's features: ``labels`` (:func:`vila_labels`) and per-document
    ``position_ids`` (:func:`document_positions`); the attention mask is
    :func:`document_causal_mask` of ``segment_ids``.

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    >>> features = vila_features(ids, seg, image_token_id=1000)
    >>> features["labels"].tolist()
    [-100, -100, -100, 17, 18, 2, -100, 25, 26, 27, 2, -100, -100, -100, -100, -100]
    >>> features["position_ids"].tolist()
    [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 0, 0, 0, 0]
    """
    return {
        "labels": vila_labels(input_ids, segment_ids, image_token_id),
        "position_ids": document_positions(segment_ids),
    }


def document_causal_mask(segment_ids: np.ndarray) -> np.ndarray:
    """``[..., L, L]``, True where query ``q`` may attend to key ``k``: the
    same document and ``k <= q``; padding attends to nothing and is attended
    by nothing (a model gives padding rows a finite value before softmax).

    >>> document_causal_mask(np.array([1, 1, 2, 0])).astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    """
    segment_ids = np.asarray(segment_ids)
    length = segment_ids.shape[-1]
    causal = np.tril(np.ones((length, length), dtype=bool))
    return document_mask(segment_ids, segment_ids) & causal


def document_mask(q_segment_ids: np.ndarray, k_segment_ids: np.ndarray) -> np.ndarray:
    """``[..., Lq, Lk]``, True where a query and a key belong to the same
    document and neither is padding: the bidirectional encoder mask
    (``document_mask(s, s)``) and the decoder's cross-attention to its own
    document's prefix (``document_mask(decoder_segment_ids, encoder_segment_ids)``).

    >>> document_mask(np.array([1, 2, 0]), np.array([1, 1, 2, 0])).astype(int).tolist()
    [[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    """
    q = np.asarray(q_segment_ids)[..., :, None]
    k = np.asarray(k_segment_ids)[..., None, :]
    return (q == k) & (q != 0)


def prefix_bounds(
    input_ids: np.ndarray, segment_ids: np.ndarray, image_token_id: int | None
) -> list[tuple[int, int]]:
    """The range ``(low, high)`` of each document's prefix length, in document
    order, for one ``[L]`` row:

    - a document with image slots: all of them are in the prefix, plus a
      leading span of the text after the last one, from none of it to all but
      its last token (``low`` = index after the last slot, ``high`` = length - 1;
      ``high`` = ``low`` when nothing follows the images);
    - a text-only document of length n: 1 … n - 1 (T5's ``prefix_lm``; 1 when n = 1).

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    >>> prefix_bounds(ids, seg, image_token_id=1000)
    [(4, 6), (1, 4)]
    """
    bounds = []
    for _, start, end in document_runs(segment_ids):
        length = end - start
        slots = (
            np.flatnonzero(np.asarray(input_ids[start:end]) == image_token_id)
            if image_token_id is not None
            else np.array([], dtype=np.int64)
        )
        if slots.size:
            low = int(slots[-1]) + 1
            bounds.append((low, max(low, length - 1)))
        else:
            bounds.append((1, max(1, length - 1)))
    return bounds


def without_target(
    input_ids: np.ndarray, segment_ids: np.ndarray, image_token_id: int | None
) -> list[int]:
    """The segments of one ``[L]`` row that would leave PrefixLM nothing to
    predict: all their tokens must go to the encoder (a piece that ends in
    an image slot, a one-token piece). The loader skips them rather than
    train on an empty target.

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1000, 1000, 1000, 2, 0, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 0, 0, 0, 0, 0])
    >>> without_target(ids, seg, image_token_id=1000)  # 2: a bare image run; 3: an EOS alone
    [2, 3]
    """
    runs = document_runs(segment_ids)
    bounds = prefix_bounds(input_ids, segment_ids, image_token_id)
    return [segment for (segment, start, end), (low, _) in zip(runs, bounds) if low >= end - start]


def sample_prefix_lengths(
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    image_token_id: int | None,
    rng: np.random.Generator,
) -> list[int]:
    """One prefix length per document of an ``[L]`` row, uniform over
    :func:`prefix_bounds`, drawn from the seeded ``rng`` (one draw per document)."""
    bounds = prefix_bounds(input_ids, segment_ids, image_token_id)
    if not bounds:
        return []
    low = np.array([b[0] for b in bounds])
    high = np.array([b[1] for b in bounds])
    return rng.integers(low, high + 1).tolist()


PREFIXLM_ARRAYS = (
    "encoder_input_ids",
    "encoder_segment_ids",
    "encoder_positions",
    "decoder_input_ids",
    "decoder_target_ids",
    "decoder_segment_ids",
    "decoder_positions",
)


def _prefixlm_arrays(
    documents: Sequence[tuple[int, np.ndarray, np.ndarray]],
    encoder_len: int,
    decoder_len: int,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """One row of PrefixLM arrays from ``(segment, prefix, rest)`` per document: the prefixes
    packed left in an encoder row of ``encoder_len``, the rests in a decoder row of
    ``decoder_len``."""
    out = {
        name: np.full(
            encoder_len if name.startswith("encoder") else decoder_len,
            pad_id if name.endswith("input_ids") or name.endswith("target_ids") else 0,
            np.int64,
        )
        for name in PREFIXLM_ARRAYS
    }
    weights = np.zeros(decoder_len, np.float32)
    encoder = decoder = 0  # where the next document's prefix / rest goes
    for segment, head, tail in documents:
        prefix, rest = head.shape[0], tail.shape[0]
        if encoder + prefix > encoder_len or decoder + rest > decoder_len:
            raise ValueError(
                f"documents of {encoder + prefix} prefix and {decoder + rest} target tokens "
                f"do not fit rows of {encoder_len} and {decoder_len}"
            )
        out["encoder_input_ids"][encoder : encoder + prefix] = head
        out["encoder_segment_ids"][encoder : encoder + prefix] = segment
        out["encoder_positions"][encoder : encoder + prefix] = np.arange(prefix)
        encoder += prefix
        out["decoder_target_ids"][decoder : decoder + rest] = tail
        # Shifted right within the document; its first input is the start token (pad, as T5).
        out["decoder_input_ids"][decoder + 1 : decoder + rest] = tail[:-1]
        out["decoder_segment_ids"][decoder : decoder + rest] = segment
        out["decoder_positions"][decoder : decoder + rest] = np.arange(rest)
        weights[decoder : decoder + rest] = 1.0
        decoder += rest
    out["decoder_loss_weights"] = weights
    return out


def split_documents(
    input_ids: np.ndarray, segment_ids: np.ndarray, prefix_lengths: Sequence[int]
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``(segment, prefix, rest)`` of each packed document of one ``[L]`` row, cut at its
    prefix length.

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    >>> [(s, p.tolist(), r.tolist()) for s, p, r in split_documents(ids, seg, [5, 2])]
    [(1, [1, 1000, 1000, 1000, 17], [18, 2]), (2, [1, 25], [26, 27, 2])]
    """
    input_ids = np.asarray(input_ids)
    runs = document_runs(segment_ids)
    if len(prefix_lengths) != len(runs):
        raise ValueError(f"{len(prefix_lengths)} prefix lengths for {len(runs)} documents")
    out = []
    for (segment, start, end), prefix in zip(runs, prefix_lengths):
        if not 0 <= prefix <= end - start:
            raise ValueError(f"prefix length {prefix} outside document {segment} of {end - start}")
        out.append((segment, input_ids[start : start + prefix], input_ids[start + prefix : end]))
    return out


def _prefixlm_row(
    input_ids: np.ndarray, segment_ids: np.ndarray, prefix_lengths: Sequence[int], pad_id: int
) -> dict[str, np.ndarray]:
    length = input_ids.shape[-1]
    documents = split_documents(input_ids, segment_ids, prefix_lengths)
    return _prefixlm_arrays(documents, length, length, pad_id)


def prefixlm_features(
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    image_token_id: int | None,
    pad_id: int,
    *,
    rng: np.random.Generator | None = None,
    prefix_lengths: Sequence[int] | Sequence[Sequence[int]] | None = None,
) -> dict[str, np.ndarray]:
    """PrefixLM features (SimVLM's encoder-decoder): each packed document is
    cut in two at its prefix length (drawn with ``rng`` by
    :func:`sample_prefix_lengths`, or given as ``prefix_lengths``, one per
    document, per row for a batch).

    - ``encoder_input_ids``, ``encoder_segment_ids``, ``encoder_positions``:
      the prefixes, packed left in document order, then padding (``pad_id``,
      segment 0, position 0). Attention: bidirectional within a document,
      ``document_mask(encoder_segment_ids, encoder_segment_ids)``.
    - ``decoder_target_ids``: the rest of each document, packed left;
      ``decoder_input_ids``: the targets shifted right within each document,
      the first input of a document being ``pad_id`` (T5's decoder start);
      ``decoder_segment_ids``, ``decoder_positions`` (from 0 per document);
      ``decoder_loss_weights``: 1.0 on every real target, 0.0 on padding.
      Attention: causal within a document (``document_causal_mask``), and
      cross-attention to the same document's prefix only
      (``document_mask(decoder_segment_ids, encoder_segment_ids)``).

    All image slots are in the encoder; the segment ids are the document's
    in both halves. With A's prefix at 5 (its image and one text token) and
    B's at 2:

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    >>> f = prefixlm_features(ids, seg, image_token_id=1000, pad_id=0, prefix_lengths=[5, 2])
    >>> for name, array in f.items():
    ...     if name != "decoder_loss_weights":
    ...         print(f"{name:21} {array.tolist()}")
    encoder_input_ids     [1, 1000, 1000, 1000, 17, 1, 25, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    encoder_segment_ids   [1, 1, 1, 1, 1, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    encoder_positions     [0, 1, 2, 3, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    decoder_input_ids     [0, 18, 0, 26, 27, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    decoder_target_ids    [18, 2, 26, 27, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    decoder_segment_ids   [1, 1, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    decoder_positions     [0, 1, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    >>> weights = f["decoder_loss_weights"]
    >>> weights.dtype, weights.tolist()  # doctest: +NORMALIZE_WHITESPACE
    (dtype('float32'),
     [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    """
    input_ids = np.asarray(input_ids)
    segment_ids = np.asarray(segment_ids)
    if (rng is None) == (prefix_lengths is None):
        raise ValueError("give exactly one of rng and prefix_lengths")
    if input_ids.ndim == 1:
        lengths = (
            prefix_lengths
            if prefix_lengths is not None
            else sample_prefix_lengths(input_ids, segment_ids, image_token_id, rng)  # type: ignore[arg-type]
        )
        return _prefixlm_row(input_ids, segment_ids, lengths, pad_id)  # type: ignore[arg-type]
    rows = []
    for row in range(input_ids.shape[0]):
        lengths = (
            prefix_lengths[row]  # type: ignore[index]
            if prefix_lengths is not None
            else sample_prefix_lengths(input_ids[row], segment_ids[row], image_token_id, rng)  # type: ignore[arg-type]
        )
        rows.append(_prefixlm_row(input_ids[row], segment_ids[row], lengths, pad_id))
    return {name: np.stack([row[name] for row in rows]) for name in rows[0]} if rows else {}


def packable_bounds(
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    image_token_id: int | None,
    encoder_len: int,
    decoder_len: int,
) -> list[tuple[int, int] | None]:
    """:func:`prefix_bounds` narrowed to the prefix lengths whose two halves fit an encoder
    row of ``encoder_len`` and a decoder row of ``decoder_len`` (the prefix at most
    ``encoder_len``, the rest at most ``decoder_len``); ``None`` for a document that fits
    no cut (more image slots than ``encoder_len``, more tokens than both rows).

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    >>> packable_bounds(ids, seg, 1000, encoder_len=5, decoder_len=3)
    [(4, 5), (2, 4)]
    >>> packable_bounds(ids, seg, 1000, encoder_len=3, decoder_len=3)  # A's image needs 4
    [None, (2, 3)]
    """
    out: list[tuple[int, int] | None] = []
    runs = document_runs(segment_ids)
    for (_, start, end), (low, high) in zip(
        runs, prefix_bounds(input_ids, segment_ids, image_token_id)
    ):
        low, high = max(low, end - start - decoder_len), min(high, encoder_len)
        out.append((low, high) if low <= high else None)
    return out


def pack_prefixlm(
    rows: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]],
    encoder_len: int,
    decoder_len: int,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """PrefixLM arrays with each stream at its own length: ``rows`` lists, per batch row, the
    ``(prefix, rest)`` of the documents it holds (:func:`split_documents`, from any samples);
    their prefixes are packed into an encoder row of ``encoder_len``, their rests into a
    decoder row of ``decoder_len``, the documents numbered 1, 2, … in both. The arrays and
    the masks are those of :func:`prefixlm_features`, ``[B, encoder_len]`` for the encoder
    and ``[B, decoder_len]`` for the decoder.

    A and B cut at 5 and 2 share a row; C (``[bos, image × 3, 31, eos]``, cut at 4) takes
    the next:

    >>> ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    >>> seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    >>> (_, *a), (_, *b) = split_documents(ids, seg, [5, 2])
    >>> (_, *c), = split_documents(np.array([1, 1000, 1000, 1000, 31, 2]), np.ones(6, int), [4])
    >>> f = pack_prefixlm([[a, b], [c]], encoder_len=8, decoder_len=6, pad_id=0)
    >>> for name, array in f.items():
    ...     print(f"{name:21} {array.tolist()}")
    encoder_input_ids     [[1, 1000, 1000, 1000, 17, 1, 25, 0], [1, 1000, 1000, 1000, 0, 0, 0, 0]]
    encoder_segment_ids   [[1, 1, 1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0, 0, 0]]
    encoder_positions     [[0, 1, 2, 3, 4, 0, 1, 0], [0, 1, 2, 3, 0, 0, 0, 0]]
    decoder_input_ids     [[0, 18, 0, 26, 27, 0], [0, 31, 0, 0, 0, 0]]
    decoder_target_ids    [[18, 2, 26, 27, 2, 0], [31, 2, 0, 0, 0, 0]]
    decoder_segment_ids   [[1, 1, 2, 2, 2, 0], [1, 1, 0, 0, 0, 0]]
    decoder_positions     [[0, 1, 0, 1, 2, 0], [0, 1, 0, 0, 0, 0]]
    decoder_loss_weights  [[1.0, 1.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]]
    """
    arrays = [
        _prefixlm_arrays(
            [
                (number, np.asarray(head), np.asarray(tail))
                for number, (head, tail) in enumerate(row, 1)
            ],
            encoder_len,
            decoder_len,
            pad_id,
        )
        for row in rows
    ]
    names = (*PREFIXLM_ARRAYS, "decoder_loss_weights")
    return {
        name: np.stack([row[name] for row in arrays])
        if arrays
        else np.zeros(
            (0, encoder_len if name.startswith("encoder") else decoder_len),
            np.float32 if name == "decoder_loss_weights" else np.int64,
        )
        for name in names
    }
