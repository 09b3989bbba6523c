"""`corpora build` on hostile inputs (issue 16), through the CLI: an input
found unreadable is one line and exit 2, whether the check before the build
or a worker finds it; a bad value or an overlong line is a counted drop, never
a failed build; local files are read only under ``--allow-local-files``."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import load_manifest, read_tar, run_cli, write_jsonl
from tests.servers import image_bytes

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SMALL = ("--seq-len", "128", "--tokens-per-image", "8", "--image-size", "32")


def _document(url: str, image_url: str, sim=0.3) -> dict:
    return {
        "url": url,
        "text_list": ["A red kite over the beach."],
        "image_info": [{"raw_url": image_url, "matched_text_index": 0, "matched_sim": sim}],
    }


def _build(corpus: str, inputs: str, output, tokenizer: str, *flags: str, workers: int = 1):
    return run_cli(
        "build",
        corpus,
        "--input",
        inputs,
        "--output",
        str(output),
        "--tokenizer",
        tokenizer,
        "--workers",
        str(workers),
        *SMALL,
        *flags,
    )


# Issue 16, defect 6: a truncated .gz exited 1 with a traceback of 16-34 lines
# (only the check before the build named the file; a worker's failure did not).
@pytest.mark.parametrize("workers", [1, 2])  # in this process, and sent back as text
def test_an_input_a_worker_finds_truncated_is_one_line_and_exit_2(
    tmp_path, tokenizer_path, workers
):
    line = json.dumps(_document("http://a.example/", "https://a.example/1.jpg")) + "\n"
    whole = gzip.compress(line.encode() * 2000)
    path = tmp_path / "docs.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])  # its first bytes read well: the check passes
    result = _build("mmc4", str(path), tmp_path / "out", tokenizer_path, workers=workers)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"corpora: {path}: Compressed file ended before the end-of-stream marker was reached"
    ]


# Issue 16, defects 2 and 9: one Infinity failed the whole build after shards were
# written; a BOM dropped the first record; a huge line was loaded whole.
def test_bad_values_bom_and_long_lines_are_counted_drops(tmp_path, tokenizer_path, image_server):
    good = _document("http://a.example/", image_server.url("/img/40x40/kite.jpg"))
    path = tmp_path / "docs.jsonl"
    write_jsonl(
        str(path),
        [
            good,
            '{"url": "http://b.example/", "text_list": ["a."], "image_info": '
            '[{"raw_url": "https://b.example/1.jpg", "matched_text_index": 0, '
            '"matched_sim": Infinity}]}',
            {**good, "url": "http://c.example/", "text_list": ["x" * 5000]},
        ],
    )
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    result = _build(
        "mmc4-pairs",
        str(path),
        tmp_path / "out",
        tokenizer_path,
        "--allow-network",
        "127.0.0.0/8",
        "--max-line-bytes",
        "4096",
    )
    assert result.returncode == 0, result.stderr
    funnel = load_manifest(str(tmp_path / "out"))["funnel"]
    assert funnel == {
        "unit": "pair",
        "input": 3,
        "kept": 1,
        "dropped": {"bad_value": 1, "line_too_long": 1},
    }


# Issue 16, defect 2: a coyo text column of the wrong type crashed the build at its
# end ("bytes is not JSON serializable"); now named before anything runs.
def test_a_parquet_column_of_the_wrong_type_is_named_before_the_build(tmp_path, tokenizer_path):
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.table({"id": [1], "url": ["https://a.example/1.jpg"], "text": [b"a"]}), path)
    result = _build("coyo", str(path), tmp_path / "out", tokenizer_path, "--min-clip-sim", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"corpora: {path}: column 'text' is binary, expected string (COYO-700M's type)"
    ]
    assert not (tmp_path / "out").exists()


# Issue 16, defect 1: a local JPEG named by a file:// URL (any host) or a plain
# path landed in a shard, with no way to turn it off.
def test_local_files_are_read_only_under_allow_local_files(tmp_path, tokenizer_path):
    images, elsewhere = tmp_path / "images", tmp_path / "elsewhere"
    images.mkdir(), elsewhere.mkdir()
    (images / "kite.jpg").write_bytes(image_bytes(40, 40, "kite"))
    (elsewhere / "secret.jpg").write_bytes(image_bytes(40, 40, "secret"))
    path = write_jsonl(
        str(tmp_path / "docs.jsonl"),
        [
            _document("http://a.example/", (images / "kite.jpg").as_uri()),
            _document("http://b.example/", str(elsewhere / "secret.jpg")),
            _document("http://c.example/", f"file://evil.example{images / 'kite.jpg'}"),
        ],
    )
    refused = _build("mmc4-pairs", path, tmp_path / "refused", tokenizer_path)
    assert refused.returncode == 1, refused.stderr  # kept nothing (issue 32, finding 3)
    assert load_manifest(str(tmp_path / "refused"))["funnel"]["dropped"] == {"local_file": 3}
    allowed = _build(
        "mmc4-pairs", path, tmp_path / "allowed", tokenizer_path, "--allow-local-files", str(images)
    )
    assert allowed.returncode == 0, allowed.stderr
    manifest = load_manifest(str(tmp_path / "allowed"))
    assert manifest["funnel"]["dropped"] == {"local_file": 2}
    (shard,) = [s["path"] for s in manifest["shards"]]
    (sample,) = read_tar(str(tmp_path / "allowed" / shard))
    assert [d["id"] for d in sample["json"]["documents"]] and "img000.jpg" in sample["__members__"]
    missing = _build(
        "mmc4-pairs", path, tmp_path / "x", tokenizer_path, "--allow-local-files", "no-such-dir"
    )
    assert missing.returncode == 2
    assert missing.stderr.strip() == "corpora: --allow-local-files no-such-dir: not a directory"


# Issue 16, defect 9: --languages took junk and other cases, exit 0, keeping nothing.
def test_unknown_languages_exit_2_naming_them(tmp_path, tokenizer_path):
    from tests import fixtures

    result = _build(
        "wit", fixtures.WIT_DUMMY_GZ, tmp_path / "out", tokenizer_path, "--languages", "EN,he,xx"
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "corpora: --languages: unknown WIT language codes: 'he' (WIT writes 'iw'), 'xx'"
    )


@pytest.mark.parametrize(
    "flag, named",
    [
        ("--max-aspect-ratio", "max aspect ratio"),
        ("--per-host-rate", "per host rate"),
        ("--progress-every", "progress interval"),
    ],
)
def test_nan_for_a_number_flag_is_one_line_exit_2(tmp_path, flag, named):
    """Issue 30, defect 16: NaN passed every range check and switched the
    aspect filter, the politeness rate or the progress off."""
    c4 = write_jsonl(str(tmp_path / "c4.jsonl"), [{"text": "x", "url": "u"}])
    result = run_cli("build", "coyo", "--input", c4, "--output", str(tmp_path / "o"), flag, "nan")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"corpora: {named} must be") and line.endswith("got nan")


@pytest.mark.parametrize("kind", ["fifo", "device", "empty", "empty payload"])
def test_inputs_that_are_not_regular_files_or_hold_nothing_are_one_line_exit_2(tmp_path, kind):
    """Issue 30, defect 7: a FIFO hung the build, /dev/zero never ended, and a
    0-byte or empty gzip built an empty corpus with exit 0."""
    import os

    path = str(tmp_path / "c4-train.00000-of-01024.json.gz")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = "/dev/zero"
    elif kind == "empty":
        open(path, "wb").close()
    else:
        with gzip.open(path, "wb"):
            pass
    result = run_cli("build", "c4", "--input", path, "--output", str(tmp_path / "o"), timeout=120)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    expected = "input is empty" if kind.startswith("empty") else "input is not a regular file"
    assert line == f"corpora: {expected}: {path}"
