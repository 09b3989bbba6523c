"""Resume after failure: a build killed partway (SIGKILL) and started again
with the same command ends with the bytes of an uninterrupted build."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from corpora.config.settings import corpus_settings
from corpora.shards import resume as core_resume
from corpora.tokens.tokenizer import Tokenizer
from pipelines import resume
from tests.beam_services import python_env
from tests.generated import mmc4_documents, write_mmc4
from tests.helpers import load_manifest, read_tar, run_cli

SMALL = (
    "--seq-len",
    "64",
    "--tokens-per-image",
    "4",
    "--image-size",
    "32",
    "--allow-private-urls",
    "--progress-every",
    "0",
)


def _build_args(docs: str, output: str, tokenizer: str, *extra: str) -> list[str]:
    return [
        "build",
        "mmc4-pairs",
        "--input",
        docs,
        "--output",
        output,
        "--tokenizer",
        tokenizer,
        *SMALL,
        *extra,
    ]


def _shards(output: str) -> dict[str, bytes]:
    return {
        os.path.basename(p): open(p, "rb").read()
        for p in sorted(glob.glob(os.path.join(output, "*.tar")))
    }


def _markers(output: str) -> list[str]:
    return glob.glob(os.path.join(output, core_resume.SHARD_MARKERS, "*.json"))


def _kill_partway(args: list[str], output: str) -> subprocess.Popen:
    """Start the build and SIGKILL its whole process group as soon as the first
    shard is complete."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        env=python_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not _markers(output) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process


@pytest.mark.slow
@pytest.mark.integration
def test_sigkill_then_same_command_finishes_only_missing_shards(
    tmp_path, image_server, tokenizer_path
):
    docs = write_mmc4(
        str(tmp_path / "docs.jsonl"), mmc4_documents(40, image_server.base, broken_every=9)
    )
    reference = str(tmp_path / "reference")
    done = run_cli(
        *_build_args(docs, reference, tokenizer_path, "--samples-per-shard", "1", "--workers", "1")
    )
    assert done.returncode == 0, done.stderr
    expected = _shards(reference)
    assert len(expected) > 10

    output = str(tmp_path / "out")
    args = _build_args(docs, output, tokenizer_path, "--samples-per-shard", "1", "--workers", "1")
    for _attempt in range(3):  # the kill must land while some, not all, shards are written
        killed = _kill_partway(args, output)
        complete = {os.path.basename(p)[: -len(".json")] for p in _markers(output)}
        if killed.returncode == -signal.SIGKILL and 0 < len(complete) < len(expected):
            break
        shutil.rmtree(output)  # landed outside the window: start over
    assert 0 < len(complete) < len(expected), "could not interrupt the build while it wrote shards"
    assert not os.path.exists(
        os.path.join(output, "manifest.json")
    )  # written last, only when complete
    before = {name: os.stat(os.path.join(output, name)) for name in complete}

    resumed = run_cli(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resumed: {len(complete)} shard(s) were already complete" in resumed.stdout

    assert _shards(output) == expected  # same bytes as the uninterrupted build
    for name, stat in before.items():  # complete shards were left untouched
        after = os.stat(os.path.join(output, name))
        assert (after.st_ino, after.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert not glob.glob(os.path.join(output, "*.tmp-*"))  # half-written attempts cleaned up

    ids = [
        doc["id"]
        for name in sorted(expected)
        for sample in read_tar(os.path.join(output, name))
        for doc in sample["json"]["documents"]
    ]
    reference_ids = [
        doc["id"]
        for name in sorted(expected)
        for sample in read_tar(os.path.join(reference, name))
        for doc in sample["json"]["documents"]
    ]
    assert len(ids) == len(set(ids))  # no duplicate sample
    assert sorted(ids) == sorted(reference_ids)  # no missing one
    manifest, reference_manifest = load_manifest(output), load_manifest(reference)
    funnel = manifest["funnel"]
    assert funnel["input"] == funnel["kept"] + sum(funnel["dropped"].values())
    assert funnel == reference_manifest["funnel"]
    assert manifest["shards"] == reference_manifest["shards"]
    # the statistics count the shards left untouched too, once each
    with open(os.path.join(output, "stats.json"), "rb") as got:
        with open(os.path.join(reference, "stats.json"), "rb") as want:
            assert got.read() == want.read()


def test_changed_settings_are_refused_unless_overwrite(tmp_path, tokenizer_path):
    output = str(tmp_path / "out")
    tokenizer = Tokenizer(tokenizer_path, 4).info
    first = corpus_settings(
        "mmc4-pairs",
        ("docs.jsonl",),
        output,
        tokenizer=tokenizer_path,
        seq_len=64,
        tokens_per_image=4,
    )
    resume.prepare_output(first, tokenizer)
    (tmp_path / "out" / "mmc4-pairs-000000.tar").write_bytes(b"old shard")

    assert resume.prepare_output(first, tokenizer) == {
        "removed": 0,
        "complete_shards": 0,
    }  # same build: resume
    changed = first.replace(seq_len=128)
    with pytest.raises(
        core_resume.SettingsChanged, match=r"settings.seq_len: 64 -> 128.*--overwrite"
    ):
        resume.prepare_output(changed, tokenizer)
    assert (tmp_path / "out" / "mmc4-pairs-000000.tar").exists()  # refused: nothing touched

    found = resume.prepare_output(changed, tokenizer, overwrite=True)
    assert found["removed"] == 2  # the old shard and the old build record
    assert not (tmp_path / "out" / "mmc4-pairs-000000.tar").exists()
    state = json.loads((tmp_path / "out" / core_resume.BUILD_STATE).read_text())
    assert state["settings"]["seq_len"] == 128


def test_output_with_unrecorded_files_is_refused(tmp_path, tokenizer_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "manifest.json").write_text("{}")
    settings = corpus_settings(
        "mmc4-pairs",
        ("docs.jsonl",),
        str(output),
        tokenizer=tokenizer_path,
        seq_len=64,
        tokens_per_image=4,
    )
    with pytest.raises(core_resume.SettingsChanged, match="no record of their settings"):
        resume.prepare_output(settings, Tokenizer(tokenizer_path, 4).info)


@pytest.mark.integration
def test_cli_refuses_changed_settings_with_one_line(tmp_path, tokenizer_path):
    output = str(tmp_path / "out")
    settings = corpus_settings(
        "mmc4-pairs", ("x",), output, tokenizer=tokenizer_path, seq_len=64, tokens_per_image=4
    )
    resume.prepare_output(settings, Tokenizer(tokenizer_path, 4).info)
    docs = write_mmc4(str(tmp_path / "docs.jsonl"), mmc4_documents(1, "http://127.0.0.1:9"))
    result = run_cli(*_build_args(docs, output, tokenizer_path, "--seq-len", "128"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "holds a build with other settings" in lines[0]
        and "--overwrite" in lines[0]
    )


def test_shards_past_the_end_of_the_finished_build_are_removed(tmp_path):
    output = tmp_path / "out"
    (output / core_resume.SHARD_MARKERS).mkdir(parents=True)
    for index in range(4):
        (output / f"coyo-{index:06d}.tar").write_bytes(b"shard")
        (output / core_resume.marker_name(f"coyo-{index:06d}.tar")).write_text("{}")
    removed = resume.remove_stale_shards(
        str(output), "coyo", ["coyo-000000.tar", "coyo-000001.tar"]
    )
    assert removed == 2
    assert sorted(p.name for p in output.glob("*.tar")) == ["coyo-000000.tar", "coyo-000001.tar"]
    assert sorted(p.name for p in (output / core_resume.SHARD_MARKERS).iterdir()) == [
        "coyo-000000.tar.json",
        "coyo-000001.tar.json",
    ]


def test_temporaries_of_interrupted_attempts_are_removed(tmp_path):
    (tmp_path / "coyo-000000.tar").write_bytes(b"complete")
    (tmp_path / "coyo-000001.tar.tmp-0123abcd").write_bytes(b"half")
    (tmp_path / "manifest.json.tmp-4567ef").write_bytes(b"{")
    (tmp_path / "stats.json.tmp-89ab").write_bytes(b"{")
    (tmp_path / "failures.parquet.tmp-cdef").write_bytes(b"PAR1")
    markers = tmp_path / core_resume.SHARD_MARKERS
    markers.mkdir(parents=True)
    (markers / "coyo-000000.tar.json").write_text("{}")
    (markers / "coyo-000001.tar.json.tmp-0a1b").write_text("{")
    assert resume.remove_temporaries(str(tmp_path), "coyo") == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [".corpora", "coyo-000000.tar"]
    assert [p.name for p in markers.iterdir()] == ["coyo-000000.tar.json"]


@pytest.mark.slow
@pytest.mark.integration
def test_sigterm_cleans_up_as_ctrl_c_does_and_exits_143(tmp_path, image_server, tokenizer_path):
    """Issue 30, defect 14: SIGTERM (timeout, Kubernetes, Slurm) left the
    output's lock, Beam's temporary folder and partial shards behind."""
    docs = write_mmc4(str(tmp_path / "docs.jsonl"), mmc4_documents(40, image_server.base))
    output = str(tmp_path / "out")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    args = _build_args(docs, output, tokenizer_path, "--samples-per-shard", "1", "--workers", "1")
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        env={**python_env(), "TMPDIR": str(temporary)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not _markers(output) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        assert process.poll() is None, "the build ended before it could be interrupted"
        process.send_signal(signal.SIGTERM)  # to the launcher alone, as timeout(1) does
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == "corpora: terminated (SIGTERM); cleaned up"
    assert not os.path.exists(os.path.join(output, "corpora.lock"))
    assert glob.glob(os.path.join(output, "*.tmp-*")) == []
    assert [p.name for p in temporary.iterdir() if p.name.startswith("beam")] == []
    # what was complete stays, and the same command finishes the build
    assert run_cli(*args).returncode == 0


@pytest.mark.slow
@pytest.mark.integration
def test_a_text_build_killed_partway_resumes_to_the_same_bytes(tmp_path, tokenizer_path):
    """A text build packs where it tokenizes (pipelines/packing.py, PackText):
    killed once its first shards are complete, the same command finishes the
    rest and writes the uninterrupted build's bytes and statistics."""
    from tests import fixtures

    inputs = tmp_path / "input"
    inputs.mkdir()
    lines = [
        json.dumps(
            {
                "text": " ".join(
                    fixtures.SENTENCES[(i + j) % len(fixtures.SENTENCES)] for j in range(i % 5 + 1)
                ),
                "timestamp": "2019-04-25T00:00:00Z",
                "url": f"https://example.org/c4/{i}",
            }
        ).encode("utf-8")
        for i in range(300)
    ]
    fixtures.write_c4_json_gz(str(inputs), lines)

    def args(output: str) -> list[str]:
        return [
            "build", "c4", "--input", str(inputs), "--output", output,
            "--tokenizer", tokenizer_path, "--seq-len", "64", "--tokens-per-image", "4",
            "--samples-per-shard", "1",
            "--workers", "1", "--progress-every", "0",
        ]  # fmt: skip

    reference = str(tmp_path / "reference")
    done = run_cli(*args(reference))
    assert done.returncode == 0, done.stderr
    expected = _shards(reference)
    assert len(expected) > 20

    output = str(tmp_path / "out")
    for _attempt in range(3):  # the kill must land while some, not all, shards are written
        killed = _kill_partway(args(output), output)
        complete = {os.path.basename(p)[: -len(".json")] for p in _markers(output)}
        if killed.returncode == -signal.SIGKILL and 0 < len(complete) < len(expected):
            break
        shutil.rmtree(output)
    assert 0 < len(complete) < len(expected), "could not interrupt the build while it wrote shards"
    resumed = run_cli(*args(output))
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resumed: {len(complete)} shard(s) were already complete" in resumed.stdout
    assert _shards(output) == expected
    assert load_manifest(output)["funnel"] == load_manifest(reference)["funnel"]
    with open(os.path.join(output, "stats.json"), "rb") as got:
        with open(os.path.join(reference, "stats.json"), "rb") as want:
            assert got.read() == want.read()
    assert not os.path.exists(os.path.join(output, ".corpora", "sequences"))
