import pickle

import numpy as np

from corpora.record import Document, ImageChunk, TextChunk
from corpora.tokenizer import Span, Tokenizer, tokenize_document


def test_document_becomes_bos_image_slots_text_eos(tokenizer_path):
    tokenizer = Tokenizer(tokenizer_path, tokens_per_image=3)
    info = tokenizer.info
    assert (info.bos_id, info.eos_id, info.pad_id) == (1, 2, 0)
    assert info.image_token_id == info.vocab_size  # first id past the vocabulary
    text_ids = tokenizer.encode("The cat sleeps.")
    doc = Document(
        "d1",
        "mmc4-pairs",
        (ImageChunk("http://x/a.jpg", data=b"jpeg"), TextChunk("The cat sleeps.")),
    )
    tokenized = tokenize_document(doc, tokenizer)
    expected = [1] + [info.image_token_id] * 3 + text_ids + [2]
    np.testing.assert_array_equal(tokenized.input_ids, np.array(expected, dtype=np.int32))
    assert tokenized.input_ids.dtype == np.int32
    n = len(text_ids)
    assert tokenized.spans == (
        Span("bos", 0, 1),
        Span("image", 1, 4, 0),
        Span("text", 4, 4 + n),
        Span("eos", 4 + n, 5 + n),
    )
    assert (tokenized.text_tokens, tokenized.image_tokens) == (n, 3)
    assert tokenized.provenance["images"][0]["url"] == "http://x/a.jpg"


def test_explicit_special_ids_override_the_defaults(tokenizer_path):
    info = Tokenizer(tokenizer_path, tokens_per_image=2, image_token_id=7, pad_id=5).info
    assert (info.image_token_id, info.pad_id) == (7, 5)


def test_tokenizer_survives_pickling_for_workers(tokenizer_path):
    tokenizer = Tokenizer(tokenizer_path, tokens_per_image=2)
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode("a cup of coffee") == tokenizer.encode("a cup of coffee")
    assert clone.info == tokenizer.info
