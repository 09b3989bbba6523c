"""Duplicates and evaluation leaks, engine-free (docs/dedup.md). One module per job:

- :mod:`~corpora.dedup.text`: a record's text, normalised, its exact hash and
  its word n-gram hashes;
- :mod:`~corpora.dedup.minhash`: MinHash signatures over word n-grams and
  their LSH band keys (``near_duplicate_text``);
- :mod:`~corpora.dedup.sources`: what ``--decontaminate PATH`` names, for
  the text and the image rules alike (a text or JSON-lines file of
  evaluation texts; images: the hook for :mod:`corpora.dedup.images`), read
  once, with each source's sha256;
- :mod:`~corpora.dedup.phash`: a 64-bit perceptual hash of decoded pixels;
- :mod:`~corpora.dedup.lsh`: Hamming-radius banding of those hashes, so every
  pair within the radius shares a bucket;
- :mod:`~corpora.dedup.images`: the image rules (``duplicate_image``,
  ``image_repeated``, ``near_duplicate_image``, ``eval_contamination``) and
  how a removal applies to pairs and documents;
- :mod:`~corpora.dedup.embeddings`: near-duplicate images by CLIP image
  embedding (``--near-dup-clip-sim``): random-hyperplane buckets, exact
  cosine within each;
- :mod:`~corpora.dedup.evaluation`: evaluation images (a folder, or a parquet
  of their hashes) with each source's sha256;
- :mod:`~corpora.dedup.index`: a build's hash index (``dedup_index.parquet``
  beside the manifest) and what ``--exclude-seen`` and ``corpora train data``
  read of another build's.

The Beam wrappers (exact groups, LSH banding, connected components) are in
``pipelines/dedup_text.py``, ``pipelines/dedup_images.py`` and
``pipelines/dedup_embeddings.py``.
"""
