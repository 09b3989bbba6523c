from tests.trainer.tiny import tiny_lm, tiny_vision  # noqa: F401  (fixtures of the model tests)
