"""``corpora build --help`` in sections, by stage and by corpus; and
``corpora build CORPUS --help``: only the flags that apply to CORPUS.

The sections come from the lists the flags are defined by
(:mod:`corpora.config.flags`, :data:`pipelines.runners.RUNNER_FLAGS`, the catalog's
corpus options), so a flag added to one of them lands in its section; a flag
in none is shown under "Other options", never left out.
"""

from __future__ import annotations

from typing import Iterator

import click

from corpora import stages
from corpora.config import catalog, flags
from corpora.config.spec import CorpusSpec
from pipelines.runners import RUNNER_FLAGS

HELP_CORPUS = "corpora.help_corpus"  # ctx.meta: the corpus named before --help
# Flags of a build of images, meaningless for a text corpus.
IMAGE_TOKEN_FLAGS = ("tokens_per_image", "image_token_id", "image_token_reserved")
RETRY_FLAGS = ("retry_failures", "retry_reason")


def sections() -> list[tuple[str, tuple[str, ...]]]:
    """``(title, flag names)`` in the order ``--help`` shows them."""
    fetch = tuple(
        name for name in flags.FETCH_FLAGS if name != "progress_every" and name not in RETRY_FLAGS
    )
    by_users: dict[str, list[str]] = {}
    own = set(flags.FETCH_FLAGS) | set(flags.CLIP_FLAGS) | set(flags.BUILD_FLAGS)
    for name in catalog.options():
        if name not in own:
            by_users.setdefault(", ".join(catalog.option_users(name)), []).append(name)
    return [
        ("Input and output", ("inputs", "output", "overwrite", "smoke", "progress_every")),
        ("Tokens and packing", flags.BUILD_FLAGS),
        ("Images: fetch, resize, limits, addresses", fetch),
        ("Images: the image store and retries", (*RETRY_FLAGS, *flags.STORE_FLAGS)),
        ("CLIP scoring", ("clip_model", "clip_pretrained", *flags.CLIP_FLAGS)),
        *((f"Corpus options: {users}", tuple(names)) for users, names in by_users.items()),
        *(
            (f"Stage {stage.name}: {stage.summary}", stage.option_names)
            for stage in stages.all_stages()
            if stage.options
        ),
        ("Runner (Beam)", RUNNER_FLAGS),
    ]


def applies(name: str, title: str, spec: CorpusSpec) -> bool:
    """Does the flag ``name`` (of section ``title``) apply to a build of ``spec``?"""
    if title.startswith("Images") or name in IMAGE_TOKEN_FLAGS:
        return spec.images
    if title == "CLIP scoring":
        return spec.clip is not None
    if title.startswith("Corpus options: "):
        return spec.option(name) is not None
    return True


class BuildCommand(click.Command):
    """``corpora build``, whose help is in sections (module doc)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--help" in args or "-h" in args:  # --help is handled before CORPUS is parsed
            named = [arg for arg in args if arg in catalog.CORPORA]
            if named:
                ctx.meta[HELP_CORPUS] = named[0]
        return super().parse_args(ctx, args)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help_text(ctx, formatter)
        corpus = ctx.meta.get(HELP_CORPUS)
        if corpus is not None:
            formatter.write_paragraph()
            formatter.write_text(
                f"The flags that apply to {corpus} (`corpora build --help`: every corpus's)."
            )

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for title, params in self._grouped(ctx):
            rows = [record for param in params if (record := param.get_help_record(ctx))]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def _grouped(self, ctx: click.Context) -> Iterator[tuple[str, list[click.Parameter]]]:
        corpus = ctx.meta.get(HELP_CORPUS)
        spec = catalog.get(corpus) if corpus is not None else None
        options = [param for param in self.get_params(ctx) if isinstance(param, click.Option)]
        placed: set[str] = set()
        for title, names in sections():
            chosen = [
                param
                for param in options
                if param.name in names
                and param.name not in placed
                and (spec is None or applies(param.name, title, spec))
            ]
            placed |= {param.name for param in options if param.name in names}
            yield title, chosen
        yield "Other options", [param for param in options if param.name not in placed]
