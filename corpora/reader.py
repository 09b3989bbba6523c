"""Reading built shards: the API the trainer and the ``corpora`` commands use.

    >>> from corpora.reader import iter_samples, load_manifest, shard_urls
    >>> manifest = load_manifest("corpora-out/mmc4-pairs")            # doctest: +SKIP
    >>> for sample in iter_samples(shard_urls("corpora-out/mmc4-pairs")):  # doctest: +SKIP
    ...     sample.input_ids, sample.segment_ids, sample.positions   # int32 [seq_len]
    ...     sample.images       # PIL images, in slot order
    ...     sample.documents    # the json entry of each packed document

URLs are local paths, ``file://`` URLs, or anything ``fsspec`` opens
(``gs://``, ``s3://``, ``hf://``); brace patterns such as
``mmc4-{000000..000041}.tar`` (the manifest's ``shard_pattern``) expand.
The code is :mod:`corpora.shards.reading`; these are its public names.
"""

from corpora.shards.reading import (
    MAX_IMAGE_PIXELS,
    BuildFiles,
    BuildInputError,
    Sample,
    ShardMismatch,
    check_manifest,
    check_member,
    check_shard,
    expand_urls,
    hf_features,
    iter_samples,
    iter_tar_samples,
    load_manifest,
    locate,
    open_url,
    segment_parts,
    shard_url,
    shard_urls,
    strict_json,
    text_decoder,
    to_sample,
    verify_build,
    verify_shard,
)

__all__ = [
    "MAX_IMAGE_PIXELS",
    "BuildFiles",
    "BuildInputError",
    "Sample",
    "ShardMismatch",
    "check_manifest",
    "check_member",
    "check_shard",
    "expand_urls",
    "hf_features",
    "iter_samples",
    "iter_tar_samples",
    "load_manifest",
    "locate",
    "open_url",
    "segment_parts",
    "shard_url",
    "shard_urls",
    "strict_json",
    "text_decoder",
    "to_sample",
    "verify_build",
    "verify_shard",
]
