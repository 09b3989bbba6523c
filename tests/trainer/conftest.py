# The trainer tests' fixtures: tiny models and a small build (see tests/trainer/tiny.py).
from tests.trainer.tiny import sample_build, tiny_lm, tiny_vision  # noqa: F401
