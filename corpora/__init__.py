"""corpora: multimodal pretraining corpora as token-packed WebDataset shards.

The core is engine-free: pure functions over :class:`corpora.record.Document`
records. Apache Beam wiring lives in the ``pipelines`` package.
"""

__version__ = "0.1.0"
FORMAT = "corpora-shards/1"
