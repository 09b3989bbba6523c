"""The output directory of a resumable build (see ``corpora/shards/resume.py``):
its recorded settings, the per-shard markers, and clean-up. Runs through
Beam's FileSystems, so it works the same on local disk, gs:// and s3://.
"""

from __future__ import annotations

import io
from typing import Any, Iterable

from apache_beam.io.filesystems import FileSystems

from corpora import shards
from corpora.config.settings import BuildSettings
from corpora.fetch.accounting import FAILURES
from corpora.shards import resume
from corpora.shards.manifest import MANIFEST
from corpora.stats.figures import STATS
from corpora.tokens.pack import PackedSequence
from corpora.tokens.tokenizer import TokenizerInfo
from pipelines import storage

EMBEDDINGS = "clip-embeddings-*.parquet"  # corpora.clip.embeddings_file_name
REPORT = "report.html"  # `corpora report`'s page: it describes the build it was made from


def prepare_output(
    settings: BuildSettings, tokenizer: TokenizerInfo, overwrite: bool = False
) -> dict[str, int]:
    """Make ``settings.output`` ready for this build (the caller holds its lock).

    A new output gets the build's fingerprint. An output of the same build is
    resumed: its complete shards stay. An output of another build, or one
    holding files a build writes (``stats.json``, ``failures.parquet`` …) with
    no record of their settings, is refused with
    :class:`corpora.shards.resume.SettingsChanged`, or, with ``overwrite``,
    emptied of every file of that build first. Returns what it found.
    """
    output = settings.output
    if not FileSystems.exists(output):
        FileSystems.mkdirs(output)
    state_path = FileSystems.join(output, resume.BUILD_STATE)
    current = resume.fingerprint(settings, tokenizer)
    previous = storage.read_json(state_path) if FileSystems.exists(state_path) else None
    corpora = {settings.corpus, ((previous or {}).get("settings") or {}).get("corpus")}
    existing = _build_files(output, sorted(c for c in corpora if isinstance(c, str) and c))
    if previous is None and existing and not overwrite:
        names = [p.rsplit("/", 1)[-1] for p in existing]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise resume.SettingsChanged(
            f"{output} already holds {len(existing)} build file(s) ({shown}) "
            "but no record of their settings; "
            "re-run with --overwrite to replace them, or choose another --output"
        )
    if overwrite:
        # every file of the previous build goes, so none of them can pass for this one's
        existing += _matching(FileSystems.join(output, REPORT))
        removed = len(existing)
        if existing:
            FileSystems.delete(existing)
        remove_temporaries(output, settings.corpus)
    else:
        resume.check_same_build(previous, current, output)
        removed = 0
    storage.write_json(state_path, current)
    complete = len(_matching(FileSystems.join(output, resume.SHARD_MARKERS, "*.json")))
    return {"removed": removed, "complete_shards": complete if not overwrite else 0}


def _matching(pattern: str) -> list[str]:
    try:
        return [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    except Exception:  # a missing folder on some file systems
        return []


def _build_files(output: str, corpora: Iterable[str]) -> list[str]:
    """The files a build of one of ``corpora`` writes in ``output``."""
    join = FileSystems.join
    names = [f"{corpus}-*.tar*" for corpus in corpora]
    names += [MANIFEST, STATS, FAILURES, EMBEDDINGS]
    names += [f"{resume.SHARD_MARKERS}/*.json", resume.BUILD_STATE]
    return [path for name in names for path in _matching(join(output, name))]


def remove_temporaries(output: str, corpus: str) -> int:
    """Delete the half-written files of interrupted attempts: every temporary
    name :func:`pipelines.storage.create_atomically` gives (``*.tmp-*``), in
    the output and in its state folder, and Beam's ``beam-temp-*`` folders."""
    temporaries = f"*{storage.TEMPORARY}*"
    paths = _matching(FileSystems.join(output, temporaries))
    paths += _matching(FileSystems.join(output, resume.STATE_DIR, temporaries))
    paths += _matching(FileSystems.join(output, resume.SHARD_MARKERS, temporaries))
    if paths:
        FileSystems.delete(paths)
    return len(paths) + storage.delete_folders(output, "beam-temp-")


def remove_stale_shards(output: str, corpus: str, current: Iterable[str]) -> int:
    """Delete shards (and their markers) that an earlier attempt of this build
    wrote past the end of the finished one: they are not in its manifest."""
    keep = set(current)
    stale = [
        p
        for p in _matching(FileSystems.join(output, f"{corpus}-*.tar"))
        if p.rsplit("/", 1)[-1] not in keep
    ]
    markers = [FileSystems.join(output, resume.marker_name(p.rsplit("/", 1)[-1])) for p in stale]
    paths = stale + [m for m in markers if FileSystems.exists(m)]
    if paths:
        FileSystems.delete(paths)
    return len(stale)


def read_marker(output: str, shard_name: str) -> dict[str, Any] | None:
    path = FileSystems.join(output, resume.marker_name(shard_name))
    if not FileSystems.exists(path):
        return None
    try:
        return storage.read_json(path)
    except ValueError:  # a marker cut short by a crash is no marker
        return None


def write_marker(output: str, shard_name: str, info: dict[str, Any]) -> None:
    storage.write_json(FileSystems.join(output, resume.marker_name(shard_name)), info)


class _Discard(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        return len(data)


def completed_shard(
    output: str, shard_name: str, samples: Iterable[tuple[str, PackedSequence]]
) -> dict[str, Any] | None:
    """The info of ``shard_name`` if a previous attempt already wrote exactly
    these ``samples`` there; ``None`` if it must be written."""
    marker = read_marker(output, shard_name)
    if marker is None or not FileSystems.exists(FileSystems.join(output, shard_name)):
        return None
    info = shards.write_shard(_Discard(), samples)  # hash what we would write, without writing
    return info if resume.is_complete(marker, info) else None
