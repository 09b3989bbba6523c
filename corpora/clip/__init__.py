"""CLIP scoring with open_clip: load a model, encode in fixed-size batches, score.

The papers' corpora are shaped by CLIP similarity (VILA ranks COYO by it,
MMC4 assigns images to sentences with ViT-L/14, DataComp keeps the top 30%).
This package lets a build score with a model of the user's choice:

- a pair record (one image, its text: ``coyo``, ``wit``, ``mmc4-pairs``) gets
  the cosine similarity of its image and text embeddings, stored as
  ``scores["clip_sim"]`` on the image and ``meta["clip_model"]`` on the
  record, so both reach each sample's ``json``;
- an interleaved document (``mmc4``, ``mmc4-reordered``) gets the image ×
  sentence similarity matrix (:func:`document_similarity`); its images are
  assigned to sentences from it as ``--reassign`` does, placed before their
  new sentences, and scored with their matched cell (:func:`score_documents`).

Models come from open_clip: ``model`` is an open_clip architecture name
(``ViT-L-14``) or the path of an open_clip model config ``.json`` (the
architecture is then the file's stem, as open_clip names its own configs);
``pretrained`` is an open_clip pretrained tag (downloaded where the machine
has network) or a local checkpoint file. Every way this can go wrong raises
:class:`ClipModelError` with one line that names the problem.

Batches have a fixed shape: the last batch is padded to ``batch_size``, so a
record's embedding does not depend on which other records share its batch,
and scores are the same whatever the number of workers. On a GPU the model
runs under float16 autocast; without one, on the CPU in float32.

torch and open_clip are imported only when a model is loaded, so the rest of
the core works without the ``clip`` extra. One module per job:
:mod:`~corpora.clip.settings`, :mod:`~corpora.clip.loading`,
:mod:`~corpora.clip.scoring`, :mod:`~corpora.clip.embeddings` and
:mod:`~corpora.clip.summary` (the manifest's ``clip`` entry).
"""

from corpora.clip.embeddings import (
    EMBEDDINGS_ROWS_PER_FILE,
    embedding_row,
    embeddings_file_count,
    embeddings_file_name,
    write_embeddings,
)
from corpora.clip.loading import (
    ClipModel,
    load_clip,
    needs_quick_gelu,
    require_clip,
    resolve_device,
)
from corpora.clip.scoring import (
    DocumentSimilarity,
    ScoredPair,
    assign_by_clip,
    decode_image,
    document_similarities,
    document_similarity,
    pair_parts,
    pair_scores,
    remove_images_below,
    round_score,
    score_documents,
    score_pairs,
    similarity_matrix,
    with_score,
)
from corpora.clip.settings import (
    CHECKPOINT_SUFFIXES,
    DEVICES,
    SCORE,
    SCORE_DECIMALS,
    ClipModelError,
    ClipSettings,
    clip_settings,
    is_checkpoint_path,
)
from corpora.clip.summary import (
    clip_summary,
)

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "ClipModel",
    "ClipModelError",
    "ClipSettings",
    "DEVICES",
    "DocumentSimilarity",
    "EMBEDDINGS_ROWS_PER_FILE",
    "SCORE",
    "SCORE_DECIMALS",
    "ScoredPair",
    "assign_by_clip",
    "clip_settings",
    "clip_summary",
    "decode_image",
    "document_similarities",
    "document_similarity",
    "embedding_row",
    "embeddings_file_count",
    "embeddings_file_name",
    "is_checkpoint_path",
    "load_clip",
    "needs_quick_gelu",
    "pair_parts",
    "pair_scores",
    "remove_images_below",
    "require_clip",
    "resolve_device",
    "round_score",
    "score_documents",
    "score_pairs",
    "similarity_matrix",
    "with_score",
    "write_embeddings",
]
