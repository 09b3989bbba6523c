"""`corpora tokenizer train` as a user runs it, on real upstream C4 and MMC4 samples."""

from __future__ import annotations

import os

import pytest
import sentencepiece as spm

from tests.helpers import UPSTREAM, run_cli


@pytest.mark.integration
def test_trains_a_model_on_c4_and_mmc4_text(tmp_path):
    output = str(tmp_path / "vocab.model")
    result = run_cli(
        "tokenizer",
        "train",
        "--input",
        os.path.join(UPSTREAM, "c4-train.00000-of-01024.first3.json.gz"),
        "--input",
        os.path.join(UPSTREAM, "mmc4_*.jsonl"),
        "--vocab-size",
        "400",
        "--output",
        output,
    )
    assert result.returncode == 0, result.stderr
    assert "from 6 texts" in result.stdout  # 3 C4 records + 3 MMC4 sentences
    model = spm.SentencePieceProcessor(model_file=output)
    assert model.get_piece_size() == 400
    assert (model.unk_id(), model.bos_id(), model.eos_id(), model.pad_id()) == (0, 1, 2, -1)
    text = "Beginners BBQ Class Taking Place in Missoula!"
    assert model.decode(model.encode(text)) == text
    assert model.encode(text) != model.encode(text, out_type=str)  # ids, not pieces


@pytest.mark.integration
@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/corpus.jsonl"], "input not found: /nonexistent/corpus.jsonl"),
        (["--input", "EMPTY"], "no text found in the inputs"),
        (
            [
                "--input",
                os.path.join(UPSTREAM, "c4_en_train00000_first3.jsonl"),
                "--vocab-size",
                "50",
            ],
            "Vocabulary size is smaller than required_chars",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    args = [str(empty) if a == "EMPTY" else a for a in args]
    if "--vocab-size" not in args:
        args += ["--vocab-size", "400"]
    result = run_cli("tokenizer", "train", *args, "--output", str(tmp_path / "x.model"))
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.integration
def test_a_trained_bpe_model_builds_a_corpus(tmp_path):
    """Llama-2's tokenizer.model is a BPE SentencePiece model with byte fallback:
    a model trained the same way here goes through a build end to end."""
    from corpora.config.bundled_sample import SAMPLE_IMAGES, materialize_sample
    from corpora.tokens.tokenizer import file_sha256
    from tests.helpers import load_manifest

    sample = materialize_sample(str(tmp_path / "input"))
    model = str(tmp_path / "bpe.model")
    trained = run_cli(
        "tokenizer",
        "train",
        "--input",
        sample,
        "--vocab-size",
        "600",
        "--model-type",
        "bpe",
        "--output",
        model,
    )
    assert trained.returncode == 0, trained.stderr
    output = str(tmp_path / "out")
    built = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        sample,
        "--output",
        output,
        "--smoke",
        "--tokenizer",
        model,
        "--workers",
        "1",
        "--allow-local-files",  # the sample's images are local files
        SAMPLE_IMAGES,
    )
    assert built.returncode == 0, built.stderr
    manifest = load_manifest(output)
    assert manifest["tokenizer"]["sha256"] == file_sha256(model)
    assert manifest["vocab_size"] == 600 and manifest["image_token_id"] == 600
    shown = run_cli("inspect", output)
    assert shown.returncode == 0 and "[image 0: 64x64, 16 slots]" in shown.stdout
