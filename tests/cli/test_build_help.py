"""`corpora build --help` in sections by stage and corpus, and `corpora build
CORPUS --help` with only what applies to CORPUS (issue 32, finding 8)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from cli.main import build, cli

SECTIONS = [
    "Input and output",
    "Tokens and packing",
    "Images: fetch, resize, limits, addresses",
    "Images: the image store and retries",
    "CLIP scoring",
    "Corpus options: coyo",
    "Corpus options: mmc4, mmc4-pairs, mmc4-reordered",
    "Corpus options: mmc4, mmc4-reordered",
    "Corpus options: wit",
    "Stage decontaminate_text: texts sharing a 13-word n-gram with an evaluation text "
    "(--decontaminate) removed",
    "Stage exclude_seen: texts and image URLs another build kept (--exclude-seen) removed, "
    "before any download",
    "Stage dedup_text: duplicate texts removed (exact or MinHash near duplicates); the "
    "smallest id kept",
    "Stage duplicate_images: one copy of each image body (sha256) and none past "
    "--max-image-repeats",
    "Stage clip_near_duplicates: images whose CLIP image embeddings are within "
    "--near-dup-clip-sim cosine of another's (random-hyperplane LSH buckets, connected "
    "components)",
    "Runner (Beam)",
    "Other options",
]


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, ["build", *args], prog_name="corpora", terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def _flags(text: str) -> list[str]:
    return re.findall(r"^  (--[a-z-]+|-h)", text, re.M)


def _sections(text: str) -> dict[str, list[str]]:
    found = re.split(r"^([A-Z][^\n]*):\n", text, flags=re.M)[1:]
    return {title: _flags(body) for title, body in zip(found[::2], found[1::2])}


def test_every_flag_is_shown_once_in_its_section():
    sections = _sections(_help("--help"))
    assert list(sections) == SECTIONS
    shown = [flag for flags in sections.values() for flag in flags]
    options = [param for param in build.params if param.param_type_name == "option"]
    assert sorted(shown) == sorted(
        [param.opts[0] for param in options] + ["-h"]  # --pack/--no-pack shows as --pack
    )
    assert sections["Corpus options: wit"] == ["--caption", "--languages", "--with-context"]
    assert "--min-clip-sim" in sections["CLIP scoring"]
    assert "--allow-local-files" in sections["Images: fetch, resize, limits, addresses"]


@pytest.mark.parametrize(
    "corpus, present, absent",
    [
        (
            "c4",
            ["--seq-len", "--runner"],
            ["--image-size", "--clip-model", "--min-sim", "--caption"],
        ),
        ("mmc4", ["--min-sim", "--reassign", "--clip-model"], ["--caption", "--max-nsfw"]),
        ("wit", ["--caption", "--image-size"], ["--min-sim", "--reassign", "--max-nsfw"]),
    ],
)
def test_a_corpus_s_help_shows_only_what_applies_to_it(corpus, present, absent):
    text = _help(corpus, "--help")
    assert f"The flags that apply to {corpus}" in text
    flags = _flags(text)
    assert set(present) <= set(flags) and not set(absent) & set(flags)
