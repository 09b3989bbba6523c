"""The two model families of the seed papers: SimVLM's PrefixLM and VILA.

Both take a batch of the trainer contract (``docs/trainer.md``) and share one
interface the loop relies on: ``model(batch)`` returns the summed loss over
the batch's valid target tokens (float32), ``model.logits(batch)`` the
logits, ``count_targets(batch)`` how many tokens the loss sums over,
``step_flops(batch)`` its training FLOPs (for MFU), and
``tokens_per_image``, ``image_size``, ``image_mean``, ``image_std`` tell the
loader how to prepare images.

- ``registry.py``: the models by name (configuration, recipe, builder) and
  ``TrainableModel``, what the loop uses of a model;
- ``prefixlm.py``, ``vila.py``: the two models;
- ``attention.py``: attention kept to each packed document (varlen, flex, dense);
- ``loss.py``: the cross-entropy a chunk of positions at a time;
- ``meta.py``: a large LM built on the meta device, each process reading its rows;
- ``flops.py``: training FLOPs of a batch;
- ``slots.py``: image features into the image slots.
"""
