from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corpora.dedup.images import (
    DUPLICATE_IMAGE,
    IMAGE_REPEATED,
    Occurrence,
    apply_removals,
    decide_exact,
    occurrences,
    url_key,
)
from corpora.record import Document, Drop, ImageChunk, TextChunk

occurrence_lists = st.lists(
    st.builds(Occurrence, st.sampled_from("abcde"), st.integers(0, 3), st.integers(1, 4)),
    min_size=1,
    max_size=12,
    unique_by=lambda o: (o.record_id, o.position),
)


@given(occurrence_lists, st.randoms(), st.booleans(), st.none() | st.integers(1, 6))
def test_the_decision_does_not_depend_on_the_order_occurrences_arrive(group, rng, dedup, most):
    shuffled = list(group)
    rng.shuffle(shuffled)
    assert decide_exact(shuffled, dedup, most) == decide_exact(group, dedup, most)


@given(occurrence_lists)
def test_exact_keeps_one_occurrence_the_smallest(group):
    removed = decide_exact(group, dedup=True, max_repeats=None)
    left = {(o.record_id, o.position) for o in group} - {(r, p) for r, p, _ in removed}
    assert left == {min((o.record_id, o.position) for o in group)}
    assert all(why == DUPLICATE_IMAGE for _, _, why in removed)


def test_an_image_in_more_documents_than_allowed_leaves_them_all():
    group = [Occurrence("a", 0, documents=5), Occurrence("b", 0), Occurrence("c", 1)]
    assert decide_exact(group, dedup=True, max_repeats=7) == [
        ("b", 0, DUPLICATE_IMAGE),
        ("c", 1, DUPLICATE_IMAGE),
    ]
    assert {why for _, _, why in decide_exact(group, dedup=True, max_repeats=6)} == {IMAGE_REPEATED}


def test_a_document_that_loses_every_image_is_kept_for_its_layout_to_judge():
    doc = Document("d", "mmc4", (TextChunk("t"), ImageChunk("u"), ImageChunk("u")))
    assert [o.position for _, o in occurrences(doc, url_key)] == [0, 1]
    left = apply_removals(doc, [(0, DUPLICATE_IMAGE), (1, IMAGE_REPEATED)], drop_document=False)
    assert left.images == [] and left.meta["images_removed"] == {
        DUPLICATE_IMAGE: 1,
        IMAGE_REPEATED: 1,
    }
    dropped = apply_removals(doc, [(1, IMAGE_REPEATED)], drop_document=True)
    assert dropped == Drop(IMAGE_REPEATED, "d", url="u")
    assert apply_removals(doc, [], drop_document=True) is doc
