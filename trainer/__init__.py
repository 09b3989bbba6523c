"""The thin trainer (PrefixLM and VILA) that consumes corpora's shards. Not built yet."""
