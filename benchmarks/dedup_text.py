"""What ``--dedup-text`` costs a build, side by side in one run.

    python benchmarks/dedup_text.py                       # 10,000 photo URLs; 200,000 C4 documents
    python benchmarks/dedup_text.py --image-counts 2000 --text-counts 20000   # a few minutes
    python benchmarks/dedup_text.py --mode exact          # the exact rule instead of near

images
    ``corpora build coyo`` of ``--image-counts`` realistic photo URLs (500-2,000 px
    JPEGs, a local server that waits 50 ms per response: the setup of
    ``benchmarks/e2e.py``'s images section), without text dedup against
    ``--dedup-text near``. The captions differ only by a number, so nothing
    is removed: the figure is the rule's own cost.
text
    ``corpora build c4`` of one ``.json.gz`` of ``--text-counts`` documents of
    C4-like lengths (``benchmarks.pack.c4_lengths``), words drawn from a
    Zipf-weighted vocabulary of 30,000, 5 % of them near copies (3 words of
    200 replaced) of another: without against ``--dedup-text near``.

The sides alternate run by run (A B, then B A); figures are medians of wall
and CPU seconds (user + system of the whole process tree) and the peak RSS;
``benchmarks/out/dedup-text-<time>.json`` keeps every run with the load
average before and after.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.e2e import (  # noqa: E402
    OUT,
    alternate,
    c4_command,
    coyo_command,
    image_server,
    median,
    photo_dir,
    run,
    url_parquet,
)
from benchmarks.pack import c4_lengths  # noqa: E402


def dedup_c4_file(count: int, share: float = 0.05) -> str:
    """A C4-format .json.gz of ``count`` documents, ``share`` of them near copies (cached)."""
    path = os.path.join(OUT, "c4-dedup", f"c4-train.{count:08d}.json.gz")
    if os.path.exists(path):
        return path
    rng = random.Random(26)
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10)))
        for _ in range(30000)
    ]
    cumulative, total = [], 0.0
    for rank in range(len(vocab)):
        total += 1 / (rank + 1)
        cumulative.append(total)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    texts: list[str] = []
    partial = path + ".partial"
    with gzip.open(partial, "wt", encoding="utf-8", compresslevel=1) as handle:
        for index, length in enumerate(c4_lengths(count)):
            if texts and rng.random() < share:
                words = rng.choice(texts[-1000:]).split(" ")
                for position in rng.sample(range(len(words)), min(3, len(words))):
                    words[position] = rng.choice(vocab)
            else:
                words = rng.choices(vocab, cum_weights=cumulative, k=max(1, length * 3 // 4))
            text = " ".join(words)
            texts.append(text)
            record = {"text": text, "timestamp": "2019-04-25T12:57:54Z"}
            record["url"] = f"https://example.org/c4/{index}"
            handle.write(json.dumps(record) + "\n")
    os.replace(partial, path)
    return path


def build(command: list[str], output: str) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    result = run(command)
    with open(os.path.join(output, "manifest.json")) as handle:
        funnel = json.load(handle)["funnel"]
    result.update(kept=funnel["kept"], dropped=funnel["dropped"])
    shutil.rmtree(output)
    return result


def sides(command, output: str, mode: str) -> dict:
    return {
        "without": lambda: build(command(output), output),
        f"--dedup-text {mode}": lambda: build(command(output) + ["--dedup-text", mode], output),
    }


def summary(name: str, runs: dict) -> dict:
    (base, base_runs), (dedup, dedup_runs) = runs.items()
    row = {"what": name}
    for key in ("wall_s", "cpu_s", "peak_rss_mib"):
        row[key] = [median(base_runs, key), median(dedup_runs, key)]
        row[key + "_ratio"] = round(row[key][1] / row[key][0], 3)
    loads = [r["load_before"][0] for rs in runs.values() for r in rs]
    row["load"] = [min(loads), max(loads)]
    row["dropped"] = dedup_runs[0]["dropped"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-counts", type=int, nargs="*", default=[10000])
    parser.add_argument("--text-counts", type=int, nargs="*", default=[200000])
    parser.add_argument("--mode", choices=("exact", "near"), default="near")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--tokenizer", default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        if args.image_counts:
            with image_server(photo_dir("realistic"), args.latency) as port:
                for count in args.image_counts:
                    print(f"images: {count:,} realistic photo URLs", file=sys.stderr)
                    urls = url_parquet(os.path.join(work, f"urls-{count}.parquet"), port, count)
                    output = os.path.join(work, "coyo-out")
                    runs = alternate(
                        sides(lambda o: coyo_command(urls, o, args), output, args.mode),
                        args.repeats,
                    )
                    rows.append(summary(f"coyo, {count:,} realistic photo URLs", runs))
        for count in args.text_counts:
            print(f"text: {count:,} C4-like documents", file=sys.stderr)
            source = dedup_c4_file(count)
            output = os.path.join(work, "c4-out")
            runs = alternate(
                sides(lambda o: c4_command(source, o, args.tokenizer, args), output, args.mode),
                args.repeats,
            )
            rows.append(summary(f"c4, {count:,} documents (5 % near copies)", runs))
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"dedup-text-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as handle:
        json.dump({"args": vars(args), "rows": rows}, handle, indent=1)
    print(f"| build | wall s (without, {args.mode}) | × | CPU s | × | peak RSS MiB | × | load |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['what']} | {row['wall_s'][0]:.1f}, {row['wall_s'][1]:.1f} "
            f"| {row['wall_s_ratio']:.2f} | {row['cpu_s'][0]:.1f}, {row['cpu_s'][1]:.1f} "
            f"| {row['cpu_s_ratio']:.2f} | {row['peak_rss_mib'][0]:.0f}, "
            f"{row['peak_rss_mib'][1]:.0f} | {row['peak_rss_mib_ratio']:.2f} "
            f"| {row['load'][0]:.1f}-{row['load'][1]:.1f} |"
        )
    print(f"runs: {path}")


if __name__ == "__main__":
    main()
