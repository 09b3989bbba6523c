"""The torch-facing loader: static shapes, real images normalised in slot
order, both objectives' features, exact resume, workers, nodes under
torch.distributed (gloo), and damaged data skipped and counted."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora import reader
from tests.helpers import REPO
from trainer.batch import CLIP_MEAN, CLIP_STD, load_image
from trainer.features import document_runs, prefix_bounds, vila_labels
from trainer.loader import (
    DataConfig,
    Loader,
    PackedDocument,
    PrefixLMPacker,
    data_config,
    smoke_data_config,
)
from trainer.models.slots import check_slots

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:This DataLoader will create"),  # 4 workers on 2 cores
]

B = 4


def _config(builds, sources, **settings) -> DataConfig:
    settings = {
        "batch_size": B,
        "num_workers": 0,
        "shuffle_buffer": 8,
        "image_size": 24,
        **settings,
    }
    return data_config([(getattr(builds, n), w) for n, w in sources], **settings)


def _take(loader, count: int) -> list[dict[str, torch.Tensor]]:
    return [batch for _, batch in zip(range(count), loader)]


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys()
        and all(
            x[k].dtype == y[k].dtype and x[k].numpy().tobytes() == y[k].numpy().tobytes() for k in x
        )
        for x, y in zip(a, b)
    )


VILA_KEYS = {"labels": torch.int64, "position_ids": torch.int64}
PREFIXLM_KEYS = {
    **{
        f"{side}_{name}": torch.int64
        for side, names in (
            ("encoder", ("input_ids", "segment_ids", "positions")),
            ("decoder", ("input_ids", "target_ids", "segment_ids", "positions")),
        )
        for name in names
    },
    "decoder_loss_weights": torch.float32,
}


@pytest.mark.parametrize("objective, extra", [("vila", VILA_KEYS), ("prefixlm", PREFIXLM_KEYS)])
def test_batches_have_the_contract_shapes_every_time(builds, objective, extra):
    loader = Loader(_config(builds, [("interleaved", 1), ("c4", 1)], objective=objective))
    L, M = 640, 3
    expected = {
        "input_ids": ((B, L), torch.int64),
        "segment_ids": ((B, L), torch.int64),
        "positions": ((B, L), torch.int64),
        "images": ((B, M, 3, 24, 24), torch.float32),
        "image_mask": ((B, M), torch.bool),
        **{k: ((B, L), dtype) for k, dtype in extra.items()},
    }
    for batch in _take(loader, 6):
        assert {k: (tuple(v.shape), v.dtype) for k, v in batch.items()} == expected
        ids, seg = batch["input_ids"].numpy(), batch["segment_ids"].numpy()
        slots = (ids == loader.spec.image_token_id).sum(axis=1)
        assert (batch["image_mask"].sum(dim=1).numpy() * 8 == slots).all()  # one image per run
        assert not batch["images"][~batch["image_mask"]].any()  # zeros in empty slots
        if objective == "vila":
            assert np.array_equal(batch["labels"].numpy(), vila_labels(ids, seg, 300))
        else:
            enc_ids = batch["encoder_input_ids"].numpy()
            assert ((enc_ids == 300).sum(axis=1) == slots).all()  # every image slot in the encoder
            for row in range(B):
                bounds = prefix_bounds(ids[row], seg[row], 300)
                lengths = np.bincount(batch["encoder_segment_ids"][row].numpy())[1:]
                lengths = [n for n in lengths if n]
                assert all(lo <= n <= hi for n, (lo, hi) in zip(lengths, bounds))


def test_images_are_the_stored_jpegs_resized_and_normalised_in_slot_order(builds):
    config = _config(builds, [("interleaved", 1)], image_size=(20, 28))
    loader = Loader(config)
    (batch, picks), = loader.preview(1)  # fmt: skip
    first = next(iter(Loader(config)))
    assert np.array_equal(first["images"].numpy(), batch["images"])  # preview = the loader's batch
    mean = np.array(CLIP_MEAN, np.float32)[:, None, None]
    std = np.array(CLIP_STD, np.float32)[:, None, None]
    for row, (_, sample) in enumerate(picks):
        stored = {s.key: s for s in reader.iter_samples(sample.url, decode_images=False)}
        jpegs = stored[sample.key].images
        assert len(jpegs) == 3
        for slot, data in enumerate(jpegs):
            pixels = load_image(data, (20, 28)).transpose(2, 0, 1).astype(np.float32)
            expected = (pixels / 255.0 - mean) / std
            np.testing.assert_allclose(batch["images"][row, slot], expected, rtol=1e-5, atol=1e-5)
        # and the json's images are in the same order as the slot runs
        hashes = [hashlib.sha256(d).hexdigest() for d in jpegs]
        assert hashes == [i["sha256"] for d in sample.documents for i in d["images"]]


def test_a_c4_row_has_no_images_and_a_text_only_blend_no_image_slots(builds):
    loader = Loader(_config(builds, [("pairs", 1), ("c4", 1)]))
    (batch, picks), = loader.preview(1)  # fmt: skip
    for row, (source, sample) in enumerate(picks):
        assert bool(batch["image_mask"][row].any()) == (source == 0)
    text = Loader(_config(builds, [("c4", 1)], image_size=None))
    batch = next(iter(text))
    assert text.spec.image_token_id is None
    assert tuple(batch["images"].shape) == (B, 0, 3, 224, 224)
    assert tuple(batch["image_mask"].shape) == (B, 0)


@pytest.mark.parametrize("workers, stop", [(0, 5), (2, 3)])
def test_stop_and_resume_gives_the_same_next_batches_byte_for_byte(builds, workers, stop):
    config = _config(builds, [("pairs", 8), ("c4", 1)], num_workers=workers, objective="prefixlm")
    straight = _take(Loader(config), stop + 6)
    interrupted = Loader(config)
    assert _same(_take(interrupted, stop), straight[:stop])
    state = json.loads(json.dumps(interrupted.state_dict()))  # fits any checkpoint
    counters = interrupted.counters
    resumed = Loader(config)
    resumed.load_state_dict(state)
    assert resumed.counters == counters
    assert _same(_take(resumed, 6), straight[stop:])
    assert resumed.counters["batches"] == stop + 6


def test_one_worker_gives_what_the_calling_process_gives(builds):
    config = _config(builds, [("interleaved", 1), ("pairs", 1)], weight_unit="images")
    in_process = _take(Loader(config), 4)
    worker = _take(Loader(DataConfig(**{**config.__dict__, "num_workers": 1})), 4)
    assert _same(in_process, worker)


def test_a_state_from_another_run_is_refused(builds):
    config = _config(builds, [("pairs", 1)])
    loader = Loader(config)
    _take(loader, 1)
    state = loader.state_dict()
    other = Loader(_config(builds, [("pairs", 1)], seed=7))
    with pytest.raises(ValueError, match="the loader state has seed 0, this loader 7"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="world_size"):
        Loader(config, rank=0, world_size=2).load_state_dict(state)


def test_counters_sum_per_source_and_a_truncated_shard_is_skipped(builds, tmp_path):
    build = str(tmp_path / "pairs")
    shutil.copytree(builds.pairs, build)
    shard = os.path.join(build, "mmc4-pairs-000004.tar")
    with open(shard, "r+b") as handle:
        handle.truncate(os.path.getsize(shard) // 3)
    loader = Loader(data_config([build], batch_size=B, num_workers=0, shuffle_buffer=0))
    batches = _take(loader, 40)  # 160 samples: more than two passes over 19 good shards
    counters = loader.counters
    assert len(batches) == 40 and counters["samples"] == 160
    assert counters["shards_skipped"] >= 2 and counters["sources"][build]["samples"] == 160
    assert counters["sources"][build]["images"] == 160


def test_an_image_that_does_not_decode_drops_its_sample_and_is_counted(builds, tmp_path):
    build = str(tmp_path / "pairs")
    shutil.copytree(builds.pairs, build)
    shard = os.path.join(build, "mmc4-pairs-000000.tar")
    with tarfile.open(shard) as tar:
        image = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    with open(shard, "r+b") as handle:  # the tar stays valid; the JPEG is noise
        handle.seek(image.offset_data)
        handle.write(b"\x00" * image.size)
    loader = Loader(data_config([build], batch_size=B, num_workers=0, shuffle_buffer=0))
    _take(loader, 30)  # two passes
    counters = loader.counters
    assert counters["samples_skipped"] == 2 and counters["samples"] == 120
    per_build = counters["sources"][build]
    assert per_build["samples"] == per_build["images"] == 120  # what the batches hold


DISTRIBUTED = textwrap.dedent(
    """
    import hashlib, json, sys
    import torch.distributed as dist
    from trainer.loader import Loader, data_config

    rank, port, build, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    config = data_config([build], batch_size=4, num_workers=2, shuffle_buffer=4, image_size=8)
    loader = Loader(config, rank=dist.get_rank(), world_size=dist.get_world_size())
    seen = []
    for _, batch in zip(range(12), loader):
        seen += [hashlib.sha256(row.numpy().tobytes()).hexdigest() for row in batch["input_ids"]]
    everyone = [None, None]
    dist.all_gather_object(everyone, seen)
    if rank == 0:
        json.dump(everyone, open(out, "w"))
    dist.destroy_process_group()
    """
)


def test_prefixlm_skips_and_counts_documents_with_nothing_to_predict(builds):
    """A piece that is all image slots (a run of images too long for one piece
    with its text) would leave the decoder an empty target: the loader takes
    it out of its sample and counts it; its images go with it."""
    with open(os.path.join(builds.reordered_long, "stats.json")) as handle:
        assert json.load(handle)["packing"]["pieces_ending_in_image"] > 0
    loader = Loader(
        data_config([(builds.reordered_long, 1.0)], batch_size=B, objective="prefixlm",
                    shuffle_buffer=8, image_size=16)
    )  # fmt: skip
    documents = 0
    for batch, _ in zip(loader, range(6)):
        for row in range(B):
            present = set(batch["input_ids"][row][batch["segment_ids"][row] > 0].tolist())
            segments = set(batch["segment_ids"][row][batch["segment_ids"][row] > 0].tolist())
            weights = batch["decoder_loss_weights"][row] > 0
            assert set(batch["decoder_segment_ids"][row][weights].tolist()) == segments
            slots = int((batch["input_ids"][row] == loader.spec.image_token_id).sum())
            assert slots == int(batch["image_mask"][row].sum()) * loader.spec.tokens_per_image
            assert present
            documents += len(segments)
    assert loader.counters["documents_without_target"] > 0 and documents > 0


def test_two_nodes_under_torch_distributed_read_disjoint_shards(builds, tmp_path):
    script = tmp_path / "node.py"
    script.write_text(DISTRIBUTED)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    out = str(tmp_path / "seen.json")
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    nodes = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), port, builds.pairs, out],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for node in nodes:
        _, err = node.communicate(timeout=300)
        assert node.returncode == 0, err
    shard_of = {
        hashlib.sha256(s.input_ids.astype(np.int64).tobytes()).hexdigest(): s.url
        for s in reader.iter_samples(reader.shard_urls(builds.pairs), decode_images=False)
    }
    seen = json.load(open(out))
    shards = [{shard_of[h] for h in rows} for rows in seen]
    assert all(len(rows) == 48 for rows in seen)
    assert shards[0] and shards[1] and not shards[0] & shards[1]
    assert len(shards[0] | shards[1]) == 20  # 48 samples each cover both nodes' 10 shards


def test_the_smoke_config_reads_a_build_where_corpora_build_smoke_puts_it(builds, tmp_path):
    # `corpora build mmc4-pairs --smoke` writes ./corpora-out/mmc4-pairs (tests/cli builds it)
    shutil.copytree(builds.pairs, tmp_path / "corpora-out" / "mmc4-pairs")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        loader = Loader(smoke_data_config())
        batch = next(iter(loader))
    finally:
        os.chdir(cwd)
    assert tuple(batch["images"].shape) == (2, 1, 3, 64, 64) and batch["image_mask"].all()


def test_builds_are_read_over_http_and_fsspec_urls_as_from_disk(builds):
    import functools
    import http.server
    import threading

    import fsspec

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=builds.root)
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    memory = fsspec.filesystem("memory")
    for name in os.listdir(builds.c4):
        if name.endswith((".tar", ".json")):
            memory.pipe(f"/c4-copy/{name}", open(os.path.join(builds.c4, name), "rb").read())
    try:
        remote = [
            (f"http://127.0.0.1:{server.server_address[1]}/pairs", 8),
            ("memory://c4-copy", 1),
        ]
        settings = {"batch_size": B, "num_workers": 0, "shuffle_buffer": 8, "image_size": 24}
        over_urls = _take(Loader(data_config(remote, **settings)), 3)
        from_disk = _take(Loader(_config(builds, [("pairs", 8), ("c4", 1)])), 3)
    finally:
        server.shutdown()
        memory.rm("/c4-copy", recursive=True)
    assert _same(over_urls, from_disk)


# PrefixLM packed to its own lengths: the pairs + C4 8:1 blend of the builds holds about
# 55 prefix tokens to 45 target tokens, so 640 tokens a sample become rows of 352 + 288.
ENCODER_LEN, DECODER_LEN = 352, 288


def _padding(batches, stream: str) -> float:
    segments = torch.cat([b[f"{stream}_segment_ids"] for b in batches])
    return float((segments == 0).float().mean())


def _source_documents(builds, names) -> set[tuple[int, ...]]:
    documents = set()
    for name in names:
        for sample in reader.iter_samples(reader.shard_urls(getattr(builds, name))):
            for _, start, end in document_runs(sample.segment_ids):
                documents.add(tuple(sample.input_ids[start:end].tolist()))
    return documents


@pytest.mark.parametrize("pairs", ["pairs", "pairs_packed"])
def test_packed_prefixlm_pads_at_most_a_fifth_of_each_stream_on_pairs_and_c4_8_to_1(builds, pairs):
    """Each row of the packed layout takes whole documents of several samples, cut as the
    unpacked layout cuts them; padding falls from about half of each stream to at most 20 %."""
    settings = {"weight_unit": "documents", "objective": "prefixlm", "batch_size": 8}
    sources = [(pairs, 8), ("c4", 1)]
    unpacked = _take(Loader(_config(builds, sources, **settings)), 40)
    loader = Loader(
        _config(builds, sources, encoder_len=ENCODER_LEN, decoder_len=DECODER_LEN, **settings)
    )
    packed = _take(loader, 40)
    before = _padding(unpacked, "encoder"), _padding(unpacked, "decoder")
    after = _padding(packed, "encoder"), _padding(packed, "decoder")
    print(f"{pairs} + c4 8:1 by documents, padding encoder, decoder: {before} -> {after}")
    assert min(before) > 0.4 and max(after) <= 0.2
    known = _source_documents(builds, [pairs, "c4"])
    image, tokens_per_image = loader.spec.image_token_id, loader.spec.tokens_per_image
    rows = 0
    for batch in packed:
        assert {k: tuple(v.shape) for k, v in batch.items()} == {
            **{k: (8, ENCODER_LEN) for k in PREFIXLM_KEYS if k.startswith("encoder")},
            **{k: (8, DECODER_LEN) for k in PREFIXLM_KEYS if k.startswith("decoder")},
            "images": (8, ENCODER_LEN // 8, 3, 24, 24),
            "image_mask": (8, ENCODER_LEN // 8),
        }
        assert check_slots(batch, image, tokens_per_image, "encoder_input_ids") is None
        for row in range(8):
            encoder = dict(
                _runs(batch["encoder_input_ids"][row], batch["encoder_segment_ids"][row])
            )
            decoder = _runs(batch["decoder_target_ids"][row], batch["decoder_segment_ids"][row])
            assert [s for s, _ in decoder] == list(range(1, len(encoder) + 1)) == list(encoder)
            for segment, target in decoder:
                assert target and encoder[segment]  # both halves of every document
                assert tuple(encoder[segment] + target) in known  # a whole document, once cut
            rows += 1
    assert rows == 320 and loader.counters["documents_too_long"] == 0


def _runs(ids, segments) -> list[tuple[int, list[int]]]:
    return [(s, ids[a:b].tolist()) for s, a, b in document_runs(segments.numpy())]


@pytest.mark.parametrize("workers, stop", [(0, 5), (2, 3)])
def test_packed_prefixlm_resumes_with_its_carry_over_byte_for_byte(builds, workers, stop):
    config = _config(
        builds,
        [("pairs_packed", 8), ("c4", 1)],
        num_workers=workers,
        objective="prefixlm",
        weight_unit="documents",
        encoder_len=ENCODER_LEN,
        decoder_len=DECODER_LEN,
    )
    straight = _take(Loader(config), stop + 6)
    assert _same(straight, _take(Loader(config), stop + 6))  # the same seed, the same batches
    interrupted = Loader(config)
    assert _same(_take(interrupted, stop), straight[:stop])
    state = json.loads(json.dumps(interrupted.state_dict()))  # fits any checkpoint
    waiting = [w["packer"]["waiting"] for w in state["worker_states"]]
    assert all(waiting), waiting  # documents were carried over to the next batch
    resumed = Loader(config)
    resumed.load_state_dict(state)
    assert _same(_take(resumed, 6), straight[stop:])
    unpacked = Loader(dataclasses.replace(config, encoder_len=None, decoder_len=None))
    with pytest.raises(ValueError, match="the loader state has encoder_len 352, this loader None"):
        unpacked.load_state_dict(state)


@pytest.mark.parametrize("packed", [False, True])
def test_a_resume_at_another_world_size_starts_the_next_pass_and_keeps_the_counters(builds, packed):
    """Two ranks' states, resumed by one rank (and by three): every stream starts the pass
    after the furthest a saved one reached, the counters go on from the saved ones, and the
    same states give the same batches."""
    lengths = {"encoder_len": ENCODER_LEN, "decoder_len": DECODER_LEN} if packed else {}
    config = _config(builds, [("pairs", 8), ("c4", 1)], objective="prefixlm", **lengths)
    saved = []
    for rank in range(2):
        loader = Loader(config, rank=rank, world_size=2)
        _take(loader, 30 + rank)  # 30 batches of 4 read pairs' 30 samples of a rank at least once
        saved.append(json.loads(json.dumps(loader.state_dict())))
    furthest = [
        max(w["blend"]["streams"][i]["pass"] for s in saved for w in s["worker_states"])
        for i in range(2)
    ]
    assert furthest[0] >= 1  # the pairs' streams are in their second pass at least
    one = Loader(config)
    one.load_state_dicts(saved)
    total = {
        key: sum(w["counters"][key] for s in saved for w in s["worker_states"])
        for key in ("batches", "samples")
    }
    assert {k: one.counters[k] for k in total} == total == {"batches": 61, "samples": 244}
    (worker,) = one.state_dict()["worker_states"]
    assert [s["pass"] for s in worker["blend"]["streams"]] == [p + 1 for p in furthest]
    assert all(s["position"] == 0 and s["buffer"] == [] for s in worker["blend"]["streams"])
    after = _take(one, 3)
    again = Loader(config)
    again.load_state_dicts(saved)
    assert _same(_take(again, 3), after)
    assert one.counters["batches"] == 64
    # and on three ranks: the saved ranks' counters are shared out, none counted twice
    three = [Loader(config, rank=rank, world_size=3) for rank in range(3)]
    for loader in three:
        loader.load_state_dicts(saved)
    assert [loader.counters["batches"] for loader in three] == [30, 31, 0]
    # the saved world size: exactly load_state_dict
    rank_one = Loader(config, rank=1, world_size=2)
    rank_one.load_state_dicts(saved)
    assert rank_one.state_dict() == saved[1]
    with pytest.raises(ValueError, match="in rank order"):
        Loader(config).load_state_dicts(saved[::-1])
    with pytest.raises(ValueError, match="the loader state has seed 0, this loader 3"):
        Loader(dataclasses.replace(config, seed=3)).load_state_dicts(saved)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(
        st.tuples(st.integers(1, 12), st.integers(1, 8), st.integers(0, 2)), min_size=1, max_size=60
    ),
    window=st.integers(1, 16),
)
def test_the_packer_fills_rows_in_stream_order_and_loses_no_document(sizes, window):
    encoder_len, decoder_len, max_images = 12, 8, 2
    pulled = []

    def more():  # endless: the given documents, then again
        prefix, target, images = sizes[len(pulled) % len(sizes)]
        doc = PackedDocument(
            0, "", str(len(pulled)), 1, np.ones(prefix, int), np.ones(target, int), [None] * images
        )
        pulled.append(doc)
        return [doc]

    packer = PrefixLMPacker(encoder_len, decoder_len, max_images, window)
    emitted = []
    for _ in range(20):
        head = packer.waiting[0] if packer.waiting else None
        row = packer.row(more)
        assert row and (head is None or row[0] is head)  # the longest waiting goes first
        assert sum(len(d.prefix) for d in row) <= encoder_len
        assert sum(len(d.target) for d in row) <= decoder_len
        assert sum(len(d.images) for d in row) <= max_images
        assert [int(d.key) for d in row] == sorted(int(d.key) for d in row)  # stream order
        emitted += row
        assert len(packer.waiting) < window + 1
    keys = [d.key for d in emitted] + [d.key for d in packer.waiting]
    assert sorted(keys, key=int) == [d.key for d in pulled]  # each document once
