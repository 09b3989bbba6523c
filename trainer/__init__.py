"""The thin trainer (PrefixLM and VILA) that consumes corpora's shards.

Data: ``stream`` (shard streams), ``blend`` (weighted builds, ``DataSpec``),
``batch`` (static shapes), ``features`` (the objectives' arrays), ``loader``
(``DataConfig``, ``Loader``); see docs/trainer.md.
"""
