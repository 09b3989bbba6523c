"""Multimodal C4 (Zhu et al. 2023): its reader and specs (:mod:`.reader`), its
metadata filter, the image-to-sentence assignment (:mod:`.assign`) and the
layouts that turn a document into pairs, interleaved or reordered records
(:mod:`.layouts`)."""

from corpora.sources.mmc4.reader import SPECS

__all__ = ["SPECS"]
