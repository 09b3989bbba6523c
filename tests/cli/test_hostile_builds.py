"""Every command that reads a build refuses a hostile one in one line, exit 2.

A build folder can come from anyone (a bucket, a download, a colleague), so
its manifest and its shards are input like any other. Each case below plants
one thing a build never writes, with the manifest's size and sha256 of the
shard updated to match (an attacker can write those too), and runs each
reader command on it: ``stats``, ``report``, ``inspect``, ``train data`` and
``train energon-prepare``. None may crash with a traceback, loop, or take the
memory the planted field asks for (issue 30, defects 5, 8, 9 and 12).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

from tests.corpora.shards.built import write_build
from tests.helpers import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SHARD = "mmc4-pairs-000000.tar"
READ_SAMPLES = ("stats", "report", "inspect", "train data")
READERS = READ_SAMPLES + ("energon-prepare",)


def _command(name: str, build: str) -> list[str]:
    if name == "train data":
        return ["train", "data", "--data", build, "--batches", "1", "--mix-samples", "0"]
    if name == "energon-prepare":
        return ["train", "energon-prepare", build]
    return [name, build]


def _manifest(build: str) -> dict:
    with open(os.path.join(build, "manifest.json")) as handle:
        return json.load(handle)


def _write_manifest(build: str, manifest: dict) -> None:
    with open(os.path.join(build, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)  # allow_nan: a NaN is written as NaN


def _set(**fields):
    def change(build: str) -> None:
        _write_manifest(build, {**_manifest(build), **fields})

    return change


def _rewrite_member(suffix: str, data: bytes, sparse_size: int | None = None):
    """Replace the first sample's member ending in ``suffix``, and make the
    manifest agree with the new shard's bytes."""

    def change(build: str) -> None:
        path = os.path.join(build, SHARD)
        with tarfile.open(path) as tar:
            members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
            done = False
            for member, content in members:
                if not done and member.name.endswith(suffix):
                    done = True
                    member.size = len(data)
                    content = data
                    if sparse_size is not None:  # a GNU sparse member declaring sparse_size
                        member.type = tarfile.GNUTYPE_SPARSE
                        member.sparse = [(0, len(data))]
                tar.addfile(member, io.BytesIO(content))
            assert done
        raw = out.getvalue()
        if sparse_size is not None:
            raw = _declare_sparse_size(raw, suffix, sparse_size)
        with open(path, "wb") as handle:
            handle.write(raw)
        manifest = _manifest(build)
        entry = next(e for e in manifest["shards"] if e["path"] == SHARD)
        entry.update(bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest())
        _write_manifest(build, manifest)

    return change


def _declare_sparse_size(raw: bytes, suffix: str, size: int) -> bytes:
    """Set the GNU sparse header's real size (offset 483, 12 octal digits) of
    the member ending in ``suffix``, fixing its checksum."""
    data = bytearray(raw)
    for start in range(0, len(data), 512):
        name = data[start : start + 100].rstrip(b"\0").decode("latin-1")
        if name.endswith(suffix) and data[start + 156 : start + 157] == b"S":
            data[start + 483 : start + 495] = f"{size:011o}\0".encode()
            data[start + 148 : start + 156] = b"        "
            checksum = sum(data[start : start + 512])
            data[start + 148 : start + 156] = f"{checksum:06o}\0 ".encode()
            return bytes(data)
    raise AssertionError("no sparse member")


def _nested_manifest(build: str) -> None:
    text = json.dumps(_manifest(build))
    with open(os.path.join(build, "manifest.json"), "w") as handle:
        handle.write(text[:-1] + ', "x": ' + "[" * 50_000 + "]" * 50_000 + "}")


def _npy_header(shape, dtype="<i4") -> bytes:
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()


def _png_bomb() -> bytes:
    buffer = io.BytesIO()
    Image.new("1", (12_000, 12_000)).save(buffer, "PNG")  # 144 M pixels, a few KB
    return buffer.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


# name → (change, commands it applies to)
CASES = {
    "tokens_per_image 0": (_set(tokens_per_image=0), READERS),
    "seq_len null": (_set(seq_len=None), READERS),
    "seq_len 2**40": (_set(seq_len=2**40), READERS),
    "image_size a string": (_set(image_size="big"), READERS),
    "NaN in the manifest": (_set(tokens_per_image=float("nan")), READERS),
    "a deeply nested manifest": (_nested_manifest, READERS),
    "sparse member of 1 GiB": (_rewrite_member(".json", b"{}", sparse_size=1 << 30), READERS),
    "deeply nested sample json": (
        _rewrite_member(".json", b"[" * 100_000 + b"]" * 100_000),
        READ_SAMPLES,
    ),
    "NaN in sample json": (
        _rewrite_member(".json", b'{"documents": [{"segment": NaN}]}'),
        READ_SAMPLES,
    ),
    "npy declaring 10**12 tokens": (
        _rewrite_member(".input_ids.npy", _npy_header((10**12,))),
        READ_SAMPLES,
    ),
    "2-D npy": (
        _rewrite_member(".input_ids.npy", _npy(np.zeros((4, 8), np.int32))),
        READ_SAMPLES,
    ),
    "float npy": (
        _rewrite_member(".segment_ids.npy", _npy(np.zeros(32, np.float64))),
        READ_SAMPLES,
    ),
    "image bomb": (_rewrite_member(".img000.jpg", _png_bomb()), ("inspect", "report")),
    "tokenizer path at a system file": (_set(tokenizer={"path": "/etc/hostname"}), ("inspect",)),
}


SHARD_CONTENT = {
    "sparse member of 1 GiB",
    "deeply nested sample json",
    "NaN in sample json",
    "npy declaring 10**12 tokens",
    "2-D npy",
    "float npy",
}


@pytest.mark.parametrize(
    "case, command",
    [(case, command) for case, (_, commands) in CASES.items() for command in commands],
)
def test_a_hostile_build_is_one_line_exit_2(tmp_path, case, command):
    """Refused in one line, exit 2; but ``train data`` reads on past a bad
    shard as training does (one warning naming it, counted), and the report
    shows a bomb's place in the gallery without decoding it."""
    build = write_build(str(tmp_path))
    CASES[case][0](build)
    result = run_cli(*_command(command, build), timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    if command == "train data" and case in SHARD_CONTENT:
        assert result.returncode == 0, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("WARNING trainer.data: ") and f"skipped {build}/{SHARD}" in line
    elif command == "report" and case == "image bomb":
        assert result.returncode == 0, result.stderr
        with open(os.path.join(build, "report.html")) as handle:
            assert "[image 0 not shown: unreadable, or too many pixels" in handle.read()
    else:
        assert result.returncode == 2, (result.returncode, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("corpora: ")


@pytest.mark.parametrize("command", READERS)
def test_a_file_that_is_not_a_build_is_one_line_exit_2(tmp_path, command):
    """``corpora stats /etc/passwd`` (defect 12): a plain file is no manifest."""
    path = tmp_path / "passwd"
    path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    result = run_cli(*_command(command, str(path)), timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("corpora: ")


def test_readers_never_write_through_a_link_planted_in_the_build(tmp_path):
    """Defect 10: report.html and energon's files replace a link, never follow it."""
    (tmp_path / "build").mkdir()
    build = write_build(str(tmp_path / "build"))
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    for name in ("report.html", f"{SHARD}.idx"):
        os.symlink(outside, os.path.join(build, name))
    assert run_cli("report", build).returncode == 0
    assert run_cli("train", "energon-prepare", build).returncode == 0
    assert outside.read_text() == "precious"
    for name in ("report.html", f"{SHARD}.idx"):
        assert not os.path.islink(os.path.join(build, name))
    # a folder the command writes into that is a link out of the build is refused
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    meta = os.path.join(build, ".nv-meta")
    os.rename(meta, tmp_path / "old-meta")
    os.symlink(elsewhere, meta)
    result = run_cli("train", "energon-prepare", build)
    assert result.returncode == 2 and os.listdir(elsewhere) == []
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("corpora: ") and "is a link" in line


def test_names_from_a_build_cannot_drive_the_terminal(tmp_path):
    """Defect 11: an escape sequence in a build's path (train data prints shard
    URLs) or in a document id (inspect prints it) is printed as text."""
    build = tmp_path / "b\x1b]0;pwned\x07"
    build.mkdir()
    write_build(str(build))
    with tarfile.open(os.path.join(build, SHARD)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".json"))
        described = json.loads(tar.extractfile(member).read())
    described["documents"][0]["id"] = "doc\x1b[2J\x1b]0;pwned\x07"
    _rewrite_member(".json", json.dumps(described).encode())(str(build))
    for command in (["train", "data", "--data", str(build), "--batches", "1", "--mix-samples", "0"],
                    ["inspect", str(build)]):  # fmt: skip
        result = run_cli(*command)
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout
        expected = "b\\x1b]0;pwned\\x07" if command[0] == "train" else "doc\\x1b[2J\\x1b]0;pwned"
        assert expected in result.stdout


@pytest.mark.parametrize(
    "command, message",
    [
        (["build", "c4", "--seq-len", "2147483648"], "--seq-len"),
        (["build", "c4", "--seq-len", str(10**12)], "--seq-len"),
        (["build", "coyo", "--image-size", "100000"], "--image-size"),
        (["train", "data", "--data", "BUILD", "--image-size", "100000"], "--image-size"),
        (["train", "data", "--data", "BUILD", "--batch-size", "100000"], "lower the batch size"),
        (["train", "data", "--data", "BUILD:inf"], "weight must be a positive number, got inf"),
        (["train", "data", "--data", "BUILD", "--seed", "-1"], "--seed"),
    ],
)
def test_sizes_past_what_the_format_allows_are_refused_before_anything_starts(
    tmp_path, command, message
):
    """Defects 2, 6 and 16: a seq_len past int32, a 100,000-pixel image side or
    a 100,000-sample batch took tens of GB (or was killed) before failing; an
    infinite weight drew one build only; a negative seed failed in numpy."""
    build = write_build(str(tmp_path))
    result = run_cli(*[build if part == "BUILD" else part for part in command], timeout=120)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("corpora: ") and message in line


def test_a_build_prints_its_paths_as_text(tmp_path):
    """Defect 11, everywhere: every command prints through one function."""
    output = str(tmp_path / "out\x1b]0;pwned\x07")
    result = run_cli("build", "mmc4-pairs", "--output", output, "--progress-every", "0")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    assert "out\\x1b]0;pwned\\x07" in result.stdout
