"""Corpus layouts: how a source document becomes the records that are packed.

``mmc4_pairs`` is VILA's pseudo-interleaved ablation: every image of an MMC4
document becomes its own record ``[image, text_list[matched_text_index]]``.
The funnel unit of ``mmc4-pairs`` is the pair: a document with three images
enters the funnel as three records (a line that cannot be parsed at all
enters as one, dropped with its reason).
"""

from __future__ import annotations

from typing import Iterator

from corpora.record import Document, Drop, ImageChunk, TextChunk, stable_id
from corpora.sources.mmc4 import Mmc4Document


def pair_id(document_id: str, image_index: int) -> str:
    return "mmc4p-" + stable_id(document_id, image_index)


def mmc4_pairs(doc: Mmc4Document, corpus: str = "mmc4-pairs") -> Iterator[Document | Drop]:
    """One record per image: the image, then its matched sentence.

    >>> from corpora.sources.mmc4 import Mmc4Image
    >>> doc = Mmc4Document("d", "http://page", ("a.", "b.", "c."),
    ...     (Mmc4Image("http://i/1.jpg", 2, 0.3), Mmc4Image("http://i/2.jpg", 0, 0.2)))
    >>> [[c.kind for c in r.chunks] + [r.chunks[1].text] for r in mmc4_pairs(doc)]
    [['image', 'text', 'c.'], ['image', 'text', 'a.']]
    """
    if not doc.images:
        yield Drop("no_images", doc.id, url=doc.url)
        return
    for index, image in enumerate(doc.images):
        rid = pair_id(doc.id, index)
        if not image.raw_url:
            yield Drop("missing_image_url", rid, url=doc.url)
            continue
        position = image.matched_text_index
        if position is None or not 0 <= position < len(doc.text_list):
            yield Drop(
                "matched_text_index_out_of_range", rid, url=image.raw_url,
                detail=f"matched_text_index={position}, {len(doc.text_list)} sentences",
            )
            continue
        sentence = doc.text_list[position].strip()
        if not sentence:
            yield Drop("empty_text", rid, url=image.raw_url)
            continue
        scores = {} if image.matched_sim is None else {"matched_sim": image.matched_sim}
        yield Document(
            id=rid,
            corpus=corpus,
            chunks=(
                ImageChunk(url=image.raw_url, scores=scores,
                           meta={"image_name": image.image_name}),
                TextChunk(sentence),
            ),
            source_url=doc.url,
            meta={
                "document_id": doc.id,
                "image_index": index,
                "matched_text_index": position,
                "source_file": doc.source_file,
                "line": doc.line,
            },
        )
