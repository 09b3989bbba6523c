import numpy as np

from corpora.inspect import segment_parts


def test_segment_parts_is_the_docstring_example():
    assert segment_parts(
        [1, 9, 9, 9, 9, 5, 6, 2], image_token=9, tokens_per_image=2, bos=1, eos=2
    ) == [("bos",), ("image", 2), ("image", 2), ("text", [5, 6]), ("eos",)]


def test_segment_parts_of_a_split_piece_and_without_a_manifest():
    # a later piece of a split document: text, then an image, no BOS
    assert segment_parts(np.array([7, 8, 9, 9, 2], dtype=np.int32), 9, 2, 1, 2) == [
        ("text", [7, 8]),
        ("image", 2),
        ("eos",),
    ]
    # no manifest: nothing is special
    assert segment_parts([1, 9, 2], None, 3, None, None) == [("text", [1, 9, 2])]
