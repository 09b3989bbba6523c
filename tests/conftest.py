from __future__ import annotations

import os

import pytest

from corpora.tokens.training import train_sentencepiece
from tests.servers import ImageServer

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

TRAINING_TEXT = [
    "A cup of coffee sits on a wooden table in the morning light.",
    "The cat sleeps on the windowsill while the rain falls outside.",
    "Rockets carry satellites from the launch pad into orbit around the earth.",
    "When you lock the door using the lock tab, all of the other doors lock at the same time.",
    "Press the master door lock switch to lock or unlock all doors and the tailgate.",
    "Beginners BBQ class taking place in Missoula this September.",
    "The photographer stands behind a camera on a tripod in the park.",
    "Galaxies far away appear as faint smudges of light in the deep field.",
] * 20


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory) -> str:
    """A tiny SentencePiece model trained here (nothing is downloaded)."""
    path = tmp_path_factory.mktemp("tokenizer") / "tiny.model"
    return train_sentencepiece(TRAINING_TEXT, str(path), vocab_size=300)


@pytest.fixture(scope="session")
def image_server():
    with ImageServer() as server:
        yield server
