"""Where the CPU of a whole command goes: py-spy on the commands of ``e2e.py``.

    python benchmarks/stage_profile.py coyo --urls 1000         # corpora build coyo, real photos
    python benchmarks/stage_profile.py img2dataset --urls 1000  # img2dataset on the same URLs
    python benchmarks/stage_profile.py c4 --documents 20000     # corpora build c4
    python benchmarks/stage_profile.py loop --documents 20000   # the plain SentencePiece loop
    python benchmarks/stage_profile.py smoke                    # corpora build mmc4-pairs --smoke
    python benchmarks/stage_profile.py summary benchmarks/profiles/coyo-realistic-1000.collapsed.gz
    python benchmarks/stage_profile.py coyo --urls 4000 --photo-dir DIR \\
        --build-args "--dedup-images near --dedup-text near"   # dedup's cost

``--photo-dir`` serves a folder of ``benchmarks/dedup.py``'s distinct photos
(read only, its first ``--urls`` photos; ``dedup.py``'s server and checks),
and ``--build-args`` adds flags to the ``corpora build coyo`` command (the
profile's name and title say them).

py-spy (``pip install py-spy``) samples every thread of every process of the
tree (Beam's SDK workers and img2dataset's pool included) ``--rate`` times a
second. Its sample counts are not CPU time on a loaded machine (a thread
waiting for a core counts, and some waiting threads show no Python frame), so
the kernel's CPU time of every thread (``/proc/PID/task/TID/stat``, read
every 0.1 s while the command runs) is spread over that thread's samples
that show Python frames (see :func:`weigh`): the shares are of CPU seconds. Each
run leaves in ``benchmarks/profiles/``:

- ``NAME.collapsed.gz``: the samples as collapsed stacks (one line per
  stack, ``frame;frame;... count``), the input of any flame graph tool;
- ``NAME.svg``: a flame graph of them (open it in a browser; hover for the
  samples of a frame);
- ``NAME.cpu.json``: the CPU seconds of every process and thread, by id;
- ``NAME.md``: the CPU seconds by what the code was doing, each
  sample put in the first category found from its innermost frame outwards
  (the rules are in :data:`RULES`; img2dataset's resizer is split by the
  statement it is running: decode, transform set-up, resize, crop, encode).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import html
import json
import linecache
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import dedup, e2e  # noqa: E402

PROFILES = os.path.join(REPO, "benchmarks", "profiles")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
PROCESS = re.compile(r'^process (?P<pid>\d+):"(?P<command>.*)"$')
PROCESS_IN_STACK = re.compile(r'process (?P<pid>\d+):"(?P<command>[^"]*)"')


# ---------------------------------------------------------------- classifying samples


def _statement(file: str, line: int | None) -> str:
    if not line:
        return ""
    for candidate in (file, os.path.join(REPO, file)):
        text = linecache.getline(candidate, line)
        if text:
            return text.strip()
    return ""


def resizer_statement(text: str) -> str | None:
    """img2dataset's ``Resizer.__call__``, by the statement it is running."""
    if "imdecode" in text:
        return "decode (cv2.imdecode)"
    if "imencode" in text:
        return "encode (cv2.imencode)"
    if re.search(r"A\.(SmallestMaxSize|LongestMaxSize|CenterCrop|PadIfNeeded)\(", text):
        return "resize: albumentations transform built per image"
    if "_transform(image=img)" in text:
        return "resize: albumentations call overhead"
    return "resizer: other (frombuffer, imghdr, stdout guard)"


# (category, test on (function, file, statement)); the first rule that
# matches the innermost frame it can decide wins. A rule that returns None
# lets the next frame out decide.
RULES: list[tuple[str, Callable]] = [
    ("start-up: imports", lambda f, p, s: "importlib._bootstrap" in p or None),
    (
        "resize (cv2.resize)",
        lambda f, p, s: ("albumentations" in p and "resize_fn(img)" in s) or None,
    ),
    ("crop", lambda f, p, s: ("albumentations" in p and f in ("center_crop", "crop")) or None),
    (
        "resizer",
        lambda f, p, s: resizer_statement(s) if p.endswith("img2dataset/resizer.py") else None,
    ),
    (
        "header check (Pillow open, EXIF, EOI scan)",
        lambda f, p, s: (
            (
                p.endswith("corpora/fetch/image.py")
                and f == "_process_image"
                and any(k in s for k in ("open_image", "getexif", "jpeg_complete"))
            )
            or (p.endswith("corpora/fetch/image.py") and f == "jpeg_complete")
            or None
        ),
    ),
    (
        "decode: Pillow (normalised images)",
        lambda f, p, s: (p.endswith("corpora/fetch/image.py") and f == "_normalise") or None,
    ),
    (
        "dedup: perceptual hash (in the fetch)",
        lambda f, p, s: "corpora/dedup/phash.py" in p or None,
    ),
    (
        "decode, resize, encode (OpenCV)",
        lambda f, p, s: p.endswith("corpora/fetch/image.py") or None,
    ),
    (
        "sha256",
        lambda f, p, s: ("sha256" in s or "hashlib" in p or "compute_hash" in s) or None,
    ),
    (
        "HTTP: request, response, body",
        lambda f, p, s: (
            any(k in p for k in ("http/client.py", "/socket.py", "/ssl.py", "urllib/request.py"))
            or f in ("_http_attempt", "_attempt", "download_image", "download_image_with_retry")
            or None
        ),
    ),
    ("tokenize: SentencePiece encode", lambda f, p, s: "sentencepiece" in p or None),
    (
        "tokenize: ids, spans, provenance",
        lambda f, p, s: "corpora/tokens/tokenizer.py" in p or None,
    ),
    ("statistics", lambda f, p, s: "corpora/stats/figures.py" in p or None),
    (
        "pack: plan, order, cut",
        lambda f, p, s: ("corpora/tokens/pack" in p and f != "group_sequences") or None,
    ),
    (
        "write shards: lay out, tar, npy, json",
        lambda f, p, s: (
            any(k in p for k in ("corpora/shards/", "tarfile", "json/encoder"))
            or f == "group_sequences"
            or None
        ),
    ),
    (
        "stash: pickle, write, read back",
        lambda f, p, s: any(k in p for k in ("corpora/store/", "pipelines/store.py")) or None,
    ),
    (
        "read input (parquet, json)",
        lambda f, p, s: (
            any(k in p for k in ("pyarrow", "corpora/sources", "json/", "gzip.py")) or None
        ),
    ),
    (
        "Beam: coders and pickling",
        lambda f, p, s: (
            any(k in p for k in ("apache_beam/coders", "pickle", "dill"))
            or f in ("dumps", "loads")
            or None
        ),
    ),
    ("Beam: gRPC and data plane", lambda f, p, s: ("grpc" in p or "data_plane" in p) or None),
    ("Beam: runner and worker", lambda f, p, s: "apache_beam" in p or None),
    (
        "fetch scheduler and thread hand-off",
        lambda f, p, s: (
            any(k in p for k in ("corpora/fetch.py", "concurrent/futures", "queue.py")) or None
        ),
    ),
    (
        "img2dataset: writer",
        lambda f, p, s: ("img2dataset/writer.py" in p or "webdataset" in p) or None,
    ),
    ("img2dataset: other", lambda f, p, s: "img2dataset" in p or None),
    (
        "dedup: text keys (MinHash, exact hashes)",
        lambda f, p, s: any(k in p for k in ("corpora/dedup/minhash.py", "dedup/text.py")) or None,
    ),
    (
        "dedup: image and text rules (their Beam steps)",
        lambda f, p, s: any(k in p for k in ("pipelines/dedup_", "corpora/dedup/")) or None,
    ),
    ("numpy (np.save, arrays)", lambda f, p, s: "numpy" in p or None),
    ("corpora: other", lambda f, p, s: "corpora/" in p or "pipelines/" in p or None),
]


def classify(frames: list[tuple[str, str, int | None]]) -> str:
    """The category of one sample, ``frames`` from the root to the leaf."""
    if any("importlib._bootstrap" in file for _, file, _ in frames):
        return "start-up: imports"
    for func, file, line in reversed(frames):
        statement = _statement(file, line)
        for category, test in RULES:
            verdict = test(func, file, statement)
            if verdict:
                return verdict if isinstance(verdict, str) else category
    leaf = frames[-1][1] if frames else ""
    return f"other ({os.path.basename(leaf) or 'native'})"


THREAD = re.compile(r"^thread \((?P<tid>\d+)\)")


def read_collapsed(path: str) -> list[tuple]:
    """``(process, pid, thread id, frames, samples)`` per line of a py-spy raw
    profile, ``frames`` as ``(function, file, line)`` from the root to the leaf."""
    opener = gzip.open if path.endswith(".gz") else open
    samples = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            process, pid, tid, frames = "", 0, 0, []
            for part in _split_stack(stack):
                match = PROCESS.match(part)
                if match:
                    process, pid, tid, frames = short_process(match["command"]), 0, 0, []
                    pid = int(match["pid"])
                    continue
                match = THREAD.match(part)
                if match:
                    tid = int(match["tid"])
                    continue
                match = FRAME.match(part)
                if match:
                    number = match["line"]
                    frames.append((match["func"], match["file"], int(number) if number else None))
                else:
                    frames.append((part, "", None))
            samples.append((process, pid, tid, frames, int(count)))
    return samples


def _split_stack(stack: str) -> list[str]:
    # a process entry holds its command line, which may hold ';' (python -c "a; b")
    parts, rest = [], stack
    while rest:
        if rest.startswith("process "):
            end = rest.find('";')
            end = len(rest) if end < 0 else end + 1
            parts.append(rest[:end])
            rest = rest[end + 1 :]
        else:
            head, _, rest = rest.partition(";")
            parts.append(head)
    return parts


SHORT_NAMES = (
    ("sdk_worker_main", "Beam SDK worker"),
    ("pipelines.workers", "Beam SDK workers, warm (the zygote and its forks)"),
    ("from cli.main import main", "corpora (main process)"),
    ("img2dataset", "img2dataset"),
    ("multiprocessing", "img2dataset worker (spawned)"),
    ("bin/python3", "img2dataset worker (spawned)"),
    ("--plain-loop", "plain loop"),
)


def _short_process_entry(match: re.Match) -> str:
    return f'process {match["pid"]}:"{short_process(match["command"])}"'


def short_process(command: str) -> str:
    if command in {name for _, name in SHORT_NAMES}:  # shortened when the profile was saved
        return command
    for pattern, name in SHORT_NAMES:
        if pattern in command:
            return name
    return command.split()[0] if command else "?"


NO_FRAME = "no Python frame seen (waits, native threads)"


def weigh(samples, cpu: dict | None, rate: int) -> list[tuple]:
    """``(process, frames, CPU seconds)`` per sample line.

    ``cpu`` holds the kernel's CPU seconds by thread and by process. A
    thread's time is spread over its samples that show Python frames; what a
    process spent beyond its threads' measured times (threads too short-lived
    or too light to reach one clock tick) over the samples of those threads.
    Time no sample with frames can carry is returned with no frames. Without
    ``cpu``, each sample with frames is ``1 / rate`` seconds.
    """
    if cpu is None:
        return [(p, frames, n / rate) for p, _, _, frames, n in samples if frames]
    threads, processes, process_of = cpu["threads"], cpu["processes"], cpu["process_of"]
    shown: collections.Counter[int] = collections.Counter()
    unmeasured: collections.Counter[int] = collections.Counter()  # per process
    names = {}
    for process, pid, tid, frames, count in samples:
        names[pid] = process
        if frames:
            shown[tid] += count
            if threads.get(tid, 0.0) == 0.0:
                unmeasured[pid] += count
    residual = dict(processes)
    for tid, seconds in threads.items():
        pid = process_of[tid]
        residual[pid] = residual.get(pid, seconds) - seconds
    weighed = []
    for process, pid, tid, frames, count in samples:
        if not frames:
            continue
        if threads.get(tid, 0.0) > 0:
            weighed.append((process, frames, threads[tid] * count / shown[tid]))
        elif pid in residual:
            weighed.append((process, frames, max(0.0, residual[pid]) * count / unmeasured[pid]))
    for tid, seconds in threads.items():
        if seconds > 0 and not shown[tid]:
            weighed.append((names.get(process_of[tid], "(other processes)"), [], seconds))
    for pid, seconds in residual.items():
        if seconds > 0 and not unmeasured[pid]:
            weighed.append((names.get(pid, "(other processes)"), [], seconds))
    return weighed


OWN_CODE = ("corpora/", "pipelines/", "cli/", "benchmarks/", "<string>")


def import_chain(frames) -> str:
    """``first > second``: the third-party package our code imported, and the
    third-party package inside it whose module body was running."""
    packages = []
    for func, file, _ in frames:
        if func != "<module>" or file.startswith(OWN_CODE) or "importlib" in file:
            continue
        package = file.split("/", 1)[0].removesuffix(".py")
        if package not in packages:
            packages.append(package)
    if not packages:
        return "own modules"
    inner = packages[-1] if len(packages) > 1 else ""
    return packages[0] + (f" > {inner}" if inner and inner != packages[0] else "")


def summary(samples, title: str, rate: int, cpu: dict | None = None) -> str:
    by_category: collections.Counter[str] = collections.Counter()
    by_process: collections.Counter[str] = collections.Counter()
    imports: collections.Counter[str] = collections.Counter()
    for process, frames, seconds in weigh(samples, cpu, rate):
        category = classify(frames) if frames else NO_FRAME
        by_category[category] += seconds
        by_process[process] += seconds
        if category == "start-up: imports":
            imports[f"{process}: {import_chain(frames)}"] += seconds
    total = sum(by_category.values()) or 1
    basis = (
        "the kernel's CPU time of each thread, spread over its py-spy samples"
        if cpu is not None
        else f"py-spy samples at {rate} Hz (no thread CPU times recorded)"
    )
    lines = [
        f"# {title}",
        "",
        f"{total:.1f} CPU seconds in all, every process of the tree; by {basis}.",
        "",
        "| where the CPU goes | CPU s | share |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {category} | {seconds:.2f} | {seconds / total:.1%} |"
        for category, seconds in by_category.most_common()
        if seconds >= 0.005
    ]
    if imports:
        lines += [
            "",
            "Start-up imports, by the package our code imported and the package it "
            "spent most in under it:",
            "",
            "| import | CPU s |",
            "|---|---:|",
        ]
        lines += [
            f"| {chain} | {seconds:.2f} |"
            for chain, seconds in imports.most_common(12)
            if seconds >= 0.05
        ]
    lines += ["", "| process | CPU s | share |", "|---|---:|---:|"]
    lines += [
        f"| {process} | {seconds:.2f} | {seconds / total:.1%} |"
        for process, seconds in by_process.most_common()
        if seconds >= 0.005
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the flame graph


def flame_svg(weighed, title: str, min_share: float = 0.002) -> str:
    """A flame graph (root at the bottom) of CPU seconds, as an SVG document."""
    root: dict = {"name": "all", "count": 0.0, "children": {}}
    for process, frames, count in weighed:
        node = root
        node["count"] += count
        names = [process]
        for func, file, number in frames:
            if "importlib._bootstrap" in file:  # the import machinery, one frame per import
                if names[-1] != "(import)":
                    names.append("(import)")
                continue
            names.append(f"{func} ({os.path.basename(file)}:{number})")
        for name in names:
            node = node["children"].setdefault(name, {"name": name, "count": 0.0, "children": {}})
            node["count"] += count
    total = root["count"] or 1
    width, row = 1600, 16

    def depth(node) -> int:
        return 1 + max((depth(c) for c in node["children"].values()), default=0)

    height = depth(root) * row + 40
    rects = []

    def place(node, x: float, level: int) -> None:
        share = node["count"] / total
        if share < min_share:
            return
        w = share * width
        y = height - (level + 1) * row - 10
        hue = 10 + zlib.crc32(node["name"].split(" (")[0].encode()) % 50
        label = html.escape(node["name"])
        text = html.escape(node["name"][: int(w / 7)]) if w > 60 else ""
        rects.append(
            f"<g><title>{label} ({node['count']:.2f} CPU s, {share:.2%})</title>"
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
            f'fill="hsl({hue},85%,60%)"/>'
            f'<text x="{x + 2:.1f}" y="{y + row - 4}" font-size="11">'
            f"{text}</text></g>"
        )
        child_x = x
        for child in sorted(node["children"].values(), key=lambda c: -c["count"]):
            place(child, child_x, level + 1)
            child_x += child["count"] / total * width

    place(root, 0.0, 0)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace"><text x="4" y="16" font-size="14">{html.escape(title)}</text>'
        + "".join(rects)
        + "</svg>\n"
    )


# ---------------------------------------------------------------- recording


TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(stat_path: str) -> tuple[int, float] | None:
    """(parent pid, utime + stime in seconds) from a /proc stat file."""
    try:
        with open(stat_path) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu(root: int, cpu: dict) -> None:
    """Update ``cpu`` with the CPU seconds of every process under ``root``
    (not itself) and of each of their threads."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _cpu_seconds(f"/proc/{entry}/stat")
            if found is not None:
                children[found[0]].append(int(entry))
    stack = list(children[root])
    while stack:
        pid = stack.pop()
        stack += children[pid]
        found = _cpu_seconds(f"/proc/{pid}/stat")
        if found is None:
            continue
        cpu["processes"][pid] = max(found[1], cpu["processes"].get(pid, 0.0))
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in map(int, tids):
            found = _cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
            if found is not None:
                cpu["threads"][tid] = max(found[1], cpu["threads"].get(tid, 0.0))
                cpu["process_of"][tid] = pid


def record(name: str, command: list[str], rate: int, title: str) -> None:
    """Run ``command`` under py-spy, reading every thread's CPU time as it runs."""
    os.makedirs(PROFILES, exist_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as raw:
        raw_path = raw.name
    cpu: dict = {"threads": {}, "processes": {}, "process_of": {}}
    try:
        with tempfile.TemporaryFile() as stderr:
            spy = subprocess.Popen(
                ["py-spy", "record", "--subprocesses", "--threads", "--rate", str(rate)]
                + ["--format", "raw", "--nonblocking", "-o", raw_path, "--"]
                + command,
                env=e2e.ENV,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            while spy.poll() is None:
                tree_cpu(spy.pid, cpu)
                time.sleep(0.1)
            if spy.returncode != 0:
                stderr.seek(0)
                tail = stderr.read()[-3000:].decode("utf-8", "replace")
                raise SystemExit(f"py-spy failed (exit {spy.returncode}):\n{tail}")
        collapsed = os.path.join(PROFILES, f"{name}.collapsed.gz")
        with open(raw_path, encoding="utf-8") as source:
            lines = source.read().splitlines()
        with gzip.open(collapsed, "wt", encoding="utf-8") as target:
            for line in lines:  # command lines shortened: they name temporary paths
                target.write(PROCESS_IN_STACK.sub(_short_process_entry, line) + "\n")
    finally:
        os.unlink(raw_path)
    with open(os.path.join(PROFILES, f"{name}.cpu.json"), "w") as handle:
        json.dump(cpu, handle)
    write_outputs(collapsed, title, rate)


def write_outputs(collapsed: str, title: str, rate: int) -> None:
    samples = read_collapsed(collapsed)
    stem = collapsed[: -len(".collapsed.gz")]
    cpu = None
    if os.path.exists(stem + ".cpu.json"):
        with open(stem + ".cpu.json") as handle:
            cpu = {
                kind: {int(key): value for key, value in values.items()}
                for kind, values in json.load(handle).items()
            }
    with open(stem + ".svg", "w", encoding="utf-8") as handle:
        handle.write(flame_svg(weigh(samples, cpu, rate), title))
    text = summary(samples, title, rate, cpu)
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("coyo", "img2dataset", "c4", "loop", "smoke", "summary"))
    parser.add_argument("collapsed", nargs="?", help="summary: a .collapsed.gz to summarise")
    parser.add_argument("--photos", choices=("realistic", "small"), default="realistic")
    parser.add_argument("--photo-dir", help="coyo: a folder of benchmarks/dedup.py's photos")
    parser.add_argument("--build-args", default="", help="coyo: more flags, as one string")
    parser.add_argument("--urls", type=int, default=1000)
    parser.add_argument("--documents", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--tokenizer", help="a SentencePiece model, 'bundled' or 'bpe8k'")
    parser.add_argument("--rate", type=int, default=100, help="samples per second")
    args = parser.parse_args()
    args.repeats = 1
    if args.what == "summary":
        if not args.collapsed:
            parser.error("summary needs a .collapsed.gz file")
        with open(args.collapsed[: -len(".collapsed.gz")] + ".md") as handle:
            title = handle.readline().lstrip("# ").strip()
        write_outputs(args.collapsed, title, args.rate)
        return
    with tempfile.TemporaryDirectory(prefix="profile-", dir=e2e.OUT) as work:
        if args.what == "smoke":
            command = e2e.CORPORA + ["build", "mmc4-pairs", "--smoke"]
            command += ["--output", os.path.join(work, "out"), "--workers", str(args.workers)]
            title = f"corpora build mmc4-pairs --smoke (bundled sample), {args.workers} workers"
            record(f"smoke-{args.workers}-workers", command, args.rate, title)
            return
        if args.what in ("coyo", "img2dataset"):
            photos, server = args.photos, e2e.image_server(e2e.photo_dir(args.photos), args.latency)
            if args.photo_dir:  # dedup.py's distinct photos, read from disk per request
                directory, _ = dedup.given_photos(args.photo_dir, args.urls, duplicates=0.1)
                photos, server = "distinct", dedup.image_server(directory, args.latency)
            extra = shlex.split(args.build_args)
            with server as port:
                urls = e2e.url_parquet(os.path.join(work, "urls.parquet"), port, args.urls)
                command = (
                    e2e.coyo_command(urls, os.path.join(work, "out"), args) + extra
                    if args.what == "coyo"
                    else e2e.img2dataset_command(urls, os.path.join(work, "out"), args.urls, args)
                )
                flags = re.sub(r"[^a-z0-9]+", "-", " ".join(extra)).strip("-")
                name = f"{args.what}-{photos}-{args.urls}" + (f"-{flags}" if flags else "")
                title = (
                    f"{'corpora build coyo' if args.what == 'coyo' else 'img2dataset'}: "
                    f"{args.urls:,} {photos} photo URLs, {args.workers} processes x "
                    f"{args.concurrency} requests, {args.latency * 1000:.0f} ms latency, "
                    f"{e2e.IMAGE_SIZE} px {e2e.RESIZE_MODE}"
                    + (f", {' '.join(extra)}" if extra else "")
                )
                record(name, command, args.rate, title)
            return
        source = e2e.c4_file(args.documents)
        tokenizer = e2e.tokenizer_path(args.tokenizer)
        output = os.path.join(work, "out")
        if args.what == "c4":
            command = e2e.c4_command(source, output, tokenizer, args)
            title = f"corpora build c4: {args.documents:,} C4-like documents"
        else:
            os.makedirs(output)
            command = e2e.loop_command(source, output, tokenizer, args)
            title = f"plain SentencePiece loop: {args.documents:,} C4-like documents"
        record(
            f"{args.what}-{args.documents}", command, args.rate, title + f", seq_len {args.seq_len}"
        )


if __name__ == "__main__":
    main()
