"""The image-fetch flags of ``corpora build``, mapped onto :class:`FetchSettings`."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from corpora.fetch import FetchSettings

DEFAULTS = FetchSettings()

# flag name → (FetchSettings field, click options)
FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--fetch-concurrency": (
        "concurrency",
        dict(
            type=click.IntRange(1),
            default=DEFAULTS.concurrency,
            help="Requests in flight per fetch worker.",
        ),
    ),
    "--per-host-concurrency": (
        "per_host_concurrency",
        dict(
            type=click.IntRange(1),
            default=DEFAULTS.per_host_concurrency,
            help="Requests in flight per host.",
        ),
    ),
    "--per-host-rate": (
        "per_host_rate",
        dict(
            type=click.FloatRange(0),
            default=DEFAULTS.per_host_rate,
            help="Request starts per second per host; 0: no cap.",
        ),
    ),
    "--connect-timeout": (
        "connect_timeout",
        dict(
            type=click.FloatRange(0, min_open=True),
            default=DEFAULTS.connect_timeout,
            help="Seconds.",
        ),
    ),
    "--read-timeout": (
        "read_timeout",
        dict(
            type=click.FloatRange(0, min_open=True),
            default=DEFAULTS.read_timeout,
            help="Seconds without a byte.",
        ),
    ),
    "--total-timeout": (
        "total_timeout",
        dict(
            type=click.FloatRange(0, min_open=True),
            default=DEFAULTS.total_timeout,
            help="Seconds for one attempt, request to last byte.",
        ),
    ),
    "--max-image-bytes": (
        "max_bytes",
        dict(
            type=click.IntRange(1),
            default=DEFAULTS.max_bytes,
            help="Abort a download past this many bytes.",
        ),
    ),
    "--max-attempts": (
        "max_attempts",
        dict(
            type=click.IntRange(1),
            default=DEFAULTS.max_attempts,
            help="Tries per URL for connection errors, 5xx and 429.",
        ),
    ),
    "--min-image-size": (
        "min_image_size",
        dict(
            type=click.IntRange(0),
            default=DEFAULTS.min_image_size,
            help="Drop images whose shorter side is smaller (image_too_small).",
        ),
    ),
    "--max-aspect-ratio": (
        "max_aspect_ratio",
        dict(
            type=click.FloatRange(1),
            default=None,
            help="Drop images more elongated than this (aspect_ratio_above_max).",
        ),
    ),
    "--max-pixels": (
        "max_pixels",
        dict(
            type=click.IntRange(1),
            default=DEFAULTS.max_pixels,
            help="Decompression-bomb guard, checked on the header (too_many_pixels).",
        ),
    ),
    "--jpeg-quality": (
        "jpeg_quality",
        dict(type=click.IntRange(1, 100), default=DEFAULTS.jpeg_quality),
    ),
    "--user-agent": (
        "user_agent",
        dict(
            default=DEFAULTS.user_agent,
            show_default=False,
            help="Sent with every request; name your project and a contact URL.",
        ),
    ),
    "--ignore-opt-out": (
        "respect_opt_out",
        dict(
            is_flag=True,
            default=False,
            help="Fetch images whose X-Robots-Tag says noai/noimageai/noindex.",
        ),
    ),
    "--allow-network": (
        "allow_networks",
        dict(
            multiple=True,
            metavar="CIDR",
            help="Let this private network through the address guard. Repeatable.",
        ),
    ),
    "--retry-failures": (
        "retry_failures",
        dict(
            default=None,
            metavar="FAILURES_PARQUET",
            help="Build only the records whose image URLs are in this "
            "failures.parquet of an earlier build.",
        ),
    ),
    "--retry-reason": (
        "retry_reasons",
        dict(
            multiple=True,
            metavar="REASON",
            help="With --retry-failures: only URLs that failed for this reason. Repeatable.",
        ),
    ),
}


def fetch_options(command):
    for flag, (_, options) in reversed(FLAGS.items()):
        options = {"show_default": "default" in options and not options.get("is_flag"), **options}
        command = click.option(flag, _param(flag), **options)(command)
    return command


def _param(flag: str) -> str:
    return "fetch_" + flag.lstrip("-").replace("-", "_")


def apply(settings: FetchSettings, flags: dict[str, Any]) -> FetchSettings:
    """``settings`` with the fetch flags given on the command line."""
    changes = {}
    for flag, (field, _) in FLAGS.items():
        value = flags[_param(flag)]
        if field == "respect_opt_out":
            value = not value
        elif field in ("allow_networks", "retry_reasons"):
            value = tuple(value)
        elif value is None:
            continue
        changes[field] = value
    return dataclasses.replace(settings, **changes)
