"""docs/trainer.md matches the code: its feature arrays are what the functions
return, and its "Other loaders" examples run against a real build."""

from __future__ import annotations

import os
import re
import shlex
import shutil

import numpy as np
import pytest

from tests.helpers import REPO, run_cli
from tests.trainer.builds import make_builds
from trainer import features

DOC = open(os.path.join(REPO, "docs", "trainer.md"), encoding="utf-8").read()


def _section(title: str) -> str:
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end > 0 else None]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _arrays(block: str) -> dict[str, list]:
    return {
        name: eval(values)  # the doc's literal lists
        for name, values in re.findall(r"^(\w+)\s+(\[.*\])$", block, re.M)
    }


def test_the_feature_arrays_in_the_doc_are_what_the_functions_return():
    blocks = [_arrays(b) for b in _blocks(_section("Features"), "")]
    sample, vila, prefixlm = (b for b in blocks if b)
    ids, seg = np.array(sample["input_ids"]), np.array(sample["segment_ids"])
    got = features.vila_features(ids, seg, image_token_id=1000)
    assert {k: got[k].tolist() for k in vila} == vila
    got = features.prefixlm_features(ids, seg, 1000, 0, prefix_lengths=[5, 2])
    assert {k: got[k].tolist() for k in prefixlm} == prefixlm
    assert set(prefixlm) == set(got)


def test_the_packed_arrays_in_the_doc_are_what_pack_prefixlm_returns():
    (block,) = [
        _arrays(b) for b in _blocks(_section("Packing PrefixLM's two streams"), "") if _arrays(b)
    ]
    ids = np.array([1, 1000, 1000, 1000, 17, 18, 2, 1, 25, 26, 27, 2, 0, 0, 0, 0])
    seg = np.array([1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])
    (_, *a), (_, *b) = features.split_documents(ids, seg, [5, 2])
    ((_, *c),) = features.split_documents(np.array([1, 1000, 1000, 1000, 31, 2]), [1] * 6, [4])
    got = features.pack_prefixlm([[a, b], [c]], encoder_len=8, decoder_len=6, pad_id=0)
    assert {k: got[k].tolist() for k in got} == block


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory, image_server, tokenizer_path):
    """A directory holding ``corpora-out/mmc4-pairs``, as the examples expect."""
    builds = make_builds(tmp_path_factory, image_server, tokenizer_path)
    root = tmp_path_factory.mktemp("docs-trainer")
    shutil.copytree(builds.pairs, root / "corpora-out" / "mmc4-pairs")
    return root


def _example(index: int) -> str:
    return _blocks(_section("Other loaders"), "python")[index]


@pytest.mark.slow
@pytest.mark.integration
def test_the_webdataset_example_runs(build_dir, monkeypatch):
    monkeypatch.chdir(build_dir)
    namespace: dict = {}
    exec(_example(0), namespace)
    sample = namespace["sample"]
    assert sample["labels"].shape == sample["input_ids.npy"].shape == (640,)
    assert len(namespace["images"]) == 1 and namespace["images"][0].size == (32, 32)


@pytest.mark.slow
@pytest.mark.integration
def test_the_hugging_face_example_runs(build_dir, monkeypatch, tmp_path):
    import datasets

    monkeypatch.chdir(build_dir)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    namespace: dict = {}
    exec(_example(1), namespace)
    row = namespace["row"]
    assert len(row["input_ids.npy"]) == 640 and row["img000.jpg"].size == (32, 32)


@pytest.mark.slow
@pytest.mark.integration
def test_the_energon_example_runs(build_dir, monkeypatch):
    pytest.importorskip("megatron.energon")  # see docs/trainer.md: verified with 7.4.1
    monkeypatch.chdir(build_dir)
    (command,) = _blocks(_section("Other loaders"), "bash")
    result = run_cli(*shlex.split(command)[1:], cwd=str(build_dir))
    assert result.returncode == 0, result.stderr
    namespace: dict = {}
    exec(_example(2), namespace)
    batch = namespace["batch"]
    assert len(batch) == 4 and all(s.input_ids.shape == (640,) for s in batch)
