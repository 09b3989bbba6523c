"""corpora: multimodal pretraining corpora as token-packed WebDataset shards.

The core is engine-free: pure functions over :class:`corpora.record.Document`
records. Apache Beam wiring lives in the ``pipelines`` package.
"""

__version__ = "0.1.0"
FORMAT = "corpora-shards/1"
# Bounds that follow from the format, checked before a build or a reader
# allocates anything: positions are int32 and no model's context comes near
# 2^20 tokens; no vision tower takes images of more than 2^14 pixels a side.
MAX_SEQ_LEN = 1 << 20
MAX_IMAGE_SIZE = 1 << 14
