"""Duplicates and evaluation leaks, engine-free (docs/dedup.md). One module per job:

- :mod:`~corpora.dedup.text`: a record's text, normalised, its exact hash and
  its word n-gram hashes;
- :mod:`~corpora.dedup.minhash`: MinHash signatures over word n-grams and
  their LSH band keys (``near_duplicate_text``);
- :mod:`~corpora.dedup.sources`: what ``--decontaminate PATH`` names
  (a text or JSON-lines file of evaluation texts; images: the hook for
  :mod:`corpora.dedup.images`), read once, with each source's sha256;
- :mod:`~corpora.dedup.index`: a build's hash index (``dedup_index.parquet``
  beside the manifest) and what ``--exclude-seen`` and ``corpora train data``
  read of another build's.

The Beam wrappers (exact groups, LSH banding, connected components) are in
``pipelines/dedup_text.py``.
"""
