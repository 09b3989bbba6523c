import os
import pickle

import numpy as np
import pytest

import corpora
from corpora.record import Document, ImageChunk, TextChunk
from corpora.tokens.tokenizer import (
    ModelIds,
    Span,
    SpecialIdError,
    Tokenizer,
    check_special_ids,
    tokenize_batch,
    tokenize_document,
)


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
    info = Tokenizer(tokenizer_path, tokens_per_image=2, image_token_id=1007, pad_id=5).info
    assert (info.image_token_id, info.pad_id) == (1007, 5)
    reserved = Tokenizer(tokenizer_path, 2, image_token_id=7, image_token_reserved=True).info
    assert reserved.image_token_id == 7


@pytest.mark.parametrize(
    "ids, message",
    [
        ({"image_token_id": 1}, "image token id 1 is the tokenizer's BOS id"),
        ({"image_token_id": 7}, "image token id 7 is a text id"),
        ({"pad_id": 2}, "pad id 2 is the tokenizer's EOS id"),
        ({"image_token_id": 2**32}, "image token id 4294967296 does not fit in int32"),
    ],
)
def test_a_tokenizer_built_from_python_checks_its_special_ids(tokenizer_path, ids, message):
    # the Python path (corpus_settings + run_build) builds its Tokenizer before anything runs
    with pytest.raises(SpecialIdError, match=message):
        Tokenizer(tokenizer_path, tokens_per_image=2, **ids)


def test_tokenizer_survives_pickling_for_workers(tokenizer_path):
    tokenizer = Tokenizer(tokenizer_path, tokens_per_image=2)
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode("a cup of coffee") == tokenizer.encode("a cup of coffee")
    assert clone.info == tokenizer.info


# ---------------------------------------------------------------- special ids (issue 16, defect 4)

SAMPLE_MODEL = os.path.join(os.path.dirname(corpora.__file__), "data", "sample.model")


def _problem(**ids) -> str:
    with pytest.raises(SpecialIdError) as caught:
        check_special_ids(ModelIds.read(SAMPLE_MODEL), **ids)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_bundled_model_and_its_defaults_pass():
    model = ModelIds.read(SAMPLE_MODEL)
    assert model == ModelIds(vocab_size=1000, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    assert check_special_ids(model) == (1000, 0)  # what Tokenizer uses when nothing is given
    info = Tokenizer(SAMPLE_MODEL, tokens_per_image=2).info
    assert (info.image_token_id, info.pad_id) == check_special_ids(model)
    assert check_special_ids(model, image_token_id=32000, pad_id=0) == (32000, 0)
    assert check_special_ids(model, pad_id=1001) == (1000, 1001)  # a pad past the vocabulary
    assert check_special_ids(model, pad_id=500) == (1000, 500)  # a text id: segment 0 tells
    assert check_special_ids(model, image_token_id=3, image_token_reserved=True) == (3, 0)


def test_image_token_id_may_not_be_a_special_or_text_id():
    assert _problem(image_token_id=1) == "image token id 1 is the tokenizer's BOS id"
    assert _problem(image_token_id=2) == "image token id 2 is the tokenizer's EOS id"
    assert _problem(image_token_id=0) == "image token id 0 is the tokenizer's UNK id"
    assert _problem(image_token_id=1, image_token_reserved=True).endswith("BOS id")
    assert _problem(image_token_id=500) == (
        "image token id 500 is a text id (vocabulary 0..999): use 1000 or more, or mark it reserved"
    )
    assert _problem(image_token_id=1000, image_token_reserved=True) == (
        "image token id 1000 is past the vocabulary (0..999), so not a reserved piece"
    )


def test_pad_id_may_not_collide():
    assert _problem(pad_id=1) == "pad id 1 is the tokenizer's BOS id"
    assert _problem(pad_id=2) == "pad id 2 is the tokenizer's EOS id"
    assert _problem(pad_id=1000) == "pad id 1000 is the image token id"
    assert _problem(image_token_id=4000, pad_id=4000) == "pad id 4000 is the image token id"


def test_pad_id_may_not_be_unk_when_the_model_has_a_pad_piece():
    model = ModelIds(vocab_size=1000, unk_id=0, bos_id=1, eos_id=2, pad_id=3)
    assert check_special_ids(model) == (1000, 3)
    with pytest.raises(SpecialIdError, match="pad id 0 is the tokenizer's UNK id"):
        check_special_ids(model, pad_id=0)


def test_ids_must_be_non_negative_int32():
    assert _problem(image_token_id=4294967296) == (
        "image token id 4294967296 does not fit in int32 (at most 2147483647)"
    )
    assert _problem(image_token_id=-5) == "image token id -5 is negative"
    assert _problem(pad_id=-1) == "pad id -1 is negative"
    assert _problem(pad_id=2**31) == "pad id 2147483648 does not fit in int32 (at most 2147483647)"
    assert _problem(image_token_id=True) == "image token id must be an integer, got True"
    assert _problem(pad_id="0") == "pad id must be an integer, got '0'"
    model = ModelIds(vocab_size=2**31, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    with pytest.raises(SpecialIdError, match="leaves no int32 image id"):
        check_special_ids(model)


def test_a_model_without_bos_or_eos_has_nothing_to_collide_with():
    model = ModelIds(vocab_size=10, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1)
    assert check_special_ids(model, pad_id=9) == (10, 9)


def test_a_batch_tokenizes_to_what_each_document_tokenizes_to(tokenizer_path):
    tokenizer = Tokenizer(tokenizer_path, tokens_per_image=3)
    docs = [
        Document("a", "c4", (TextChunk("The cat sleeps."),), source_url="http://a/"),
        Document("b", "mmc4", (ImageChunk("http://x/1.jpg", data=b"j"), TextChunk("A dog."))),
        Document("c", "mmc4", (TextChunk(""), ImageChunk("http://x/2.jpg"), TextChunk(" "))),
        Document("d", "c4", (TextChunk("One."), TextChunk("Two."), TextChunk("Three."))),
    ]
    batch = tokenize_batch(docs, tokenizer)
    for got, doc in zip(batch, docs, strict=True):
        one = tokenize_document(doc, tokenizer)
        np.testing.assert_array_equal(got.input_ids, one.input_ids)
        assert got.input_ids.dtype == np.int32
        assert (got.id, got.spans, got.images, got.provenance) == (
            one.id,
            one.spans,
            one.images,
            one.provenance,
        )
    assert tokenize_batch([], tokenizer) == []
    encoded = tokenizer.encode_batch(["A dog.", ""])
    assert [ids.tolist() for ids in encoded] == [tokenizer.encode("A dog."), []]
    assert all(ids.dtype == np.int32 for ids in encoded)
