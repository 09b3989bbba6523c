"""Generated MMC4-format corpora whose images come from the test image server."""

from __future__ import annotations

import json

WORDS = ("coffee", "rocket", "galaxy", "camera", "grass", "brick", "cat", "orbit", "table", "light")


def mmc4_documents(
    count: int,
    image_base: str,
    images_per_doc: int = 2,
    broken_every: int = 0,
    image_size: int = 48,
) -> list[dict]:
    """``count`` MMC4 documents with ``images_per_doc`` images each, served
    by ``image_base`` (the test image server); every ``broken_every``-th image
    URL answers 404, so the funnel has drops."""
    docs = []
    image = 0
    for number in range(count):
        sentences = [
            f"Document {number} sentence {s}: a {WORDS[(number + s) % len(WORDS)]} "
            f"near the {WORDS[(number * 3 + s) % len(WORDS)]}."
            for s in range(images_per_doc + 1)
        ]
        infos = []
        for index in range(images_per_doc):
            image += 1
            broken = broken_every and image % broken_every == 0
            path = (
                "/status/404"
                if broken
                else f"/img/{image_size}x{image_size}/doc{number}-{index}.jpg"
            )
            infos.append(
                {
                    "raw_url": image_base + path,
                    "image_name": f"doc{number}-{index}.jpg",
                    "matched_text_index": index + 1,
                    "matched_sim": 0.3,
                    "face_detections": None,
                }
            )
        docs.append(
            {
                "url": f"https://example.org/doc/{number}",
                "text_list": sentences,
                "image_info": infos,
                "similarity_matrix": None,
                "could_have_url_duplicate": 0,
            }
        )
    return docs


def write_mmc4(path: str, docs: list[dict]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for doc in docs:
            handle.write(json.dumps(doc) + "\n")
    return path
