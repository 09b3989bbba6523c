"""The image-fetch flags of ``corpora build``.

Each flag's parameter name (``--fetch-concurrency`` → ``fetch_concurrency``)
is a key of :data:`corpora.config.flags.FETCH_FLAGS`, which maps it onto
:class:`~corpora.fetch.FetchSettings`; defaults are FetchSettings's own.
"""

from __future__ import annotations

from typing import Any

import click

from cli.corpus_options import help_for
from corpora.fetch import FetchSettings

DEFAULTS = FetchSettings()

# flag → click options
FLAGS: dict[str, dict[str, Any]] = {
    "--fetch-concurrency": dict(
        type=click.IntRange(1),
        default=DEFAULTS.concurrency,
        help="Requests in flight per fetch worker.",
    ),
    "--per-host-concurrency": dict(
        type=click.IntRange(1),
        default=DEFAULTS.per_host_concurrency,
        help="Requests in flight per host.",
    ),
    "--per-host-rate": dict(
        type=click.FloatRange(0),
        default=DEFAULTS.per_host_rate,
        help="Request starts per second per host; 0: no cap.",
    ),
    "--connect-timeout": dict(
        type=click.FloatRange(0, min_open=True),
        default=DEFAULTS.connect_timeout,
        help="Seconds.",
    ),
    "--read-timeout": dict(
        type=click.FloatRange(0, min_open=True),
        default=DEFAULTS.read_timeout,
        help="Seconds without a byte.",
    ),
    "--total-timeout": dict(
        type=click.FloatRange(0, min_open=True),
        default=DEFAULTS.total_timeout,
        help="Seconds for one attempt, request to last byte.",
    ),
    "--max-image-bytes": dict(
        type=click.IntRange(1),
        default=DEFAULTS.max_bytes,
        help="Abort a download past this many bytes.",
    ),
    "--max-attempts": dict(
        type=click.IntRange(1),
        default=DEFAULTS.max_attempts,
        help="Tries per URL for connection errors, 5xx and 429.",
    ),
    "--min-image-size": dict(
        type=click.IntRange(0),
        default=DEFAULTS.min_image_size,
        help="Drop images whose shorter side is smaller (image_too_small).",
    ),
    "--max-aspect-ratio": dict(
        type=click.FloatRange(1),
        default=None,
        help="Drop images more elongated than this (aspect_ratio_above_max; default 64 on "
        "every fetched image, which also bounds the resize). Also " + help_for("max_aspect_ratio"),
    ),
    "--max-pixels": dict(
        type=click.IntRange(1),
        default=DEFAULTS.max_pixels,
        help="Decompression-bomb guard, checked on the header (too_many_pixels).",
    ),
    "--jpeg-quality": dict(type=click.IntRange(1, 100), default=DEFAULTS.jpeg_quality),
    "--user-agent": dict(
        default=DEFAULTS.user_agent,
        show_default=False,
        help="Sent with every request (default: corpora, its version and that it honours "
        "robots.txt). An agent without the corpora token gets it appended: robots.txt "
        "groups for corpora still apply.",
    ),
    "--contact": dict(
        default=None,
        metavar="URL_OR_EMAIL",
        help="Your contact, added to the user agent so that site owners can reach you "
        "(recommended).",
    ),
    "--ignore-opt-out": dict(
        is_flag=True,
        default=False,
        help="Turns off the opt-outs sent with an image: X-Robots-Tag noai, noimageai, noml, "
        "noindex, noimageindex (opted_out) and tdm-reservation: 1 (tdm_reserved). "
        "robots.txt is still honoured.",
    ),
    "--tdmrep": dict(
        is_flag=True,
        default=False,
        help="Also read each host's /.well-known/tdmrep.json (W3C TDMRep, once per host) and "
        "drop the images it reserves (tdm_reserved) without requesting them.",
    ),
    "--allow-network": dict(
        multiple=True,
        metavar="CIDR",
        help="Let this private network through the address guard. Repeatable.",
    ),
    "--allow-local-files": dict(
        multiple=True,
        metavar="DIR",
        help="Read file:// URLs and local paths of images, only regular files under this "
        "directory (refused by default as local_file). Repeatable.",
    ),
    "--retry-failures": dict(
        default=None,
        metavar="FAILURES_PARQUET",
        help="Build only the records whose image URLs are in this "
        "failures.parquet of an earlier build.",
    ),
    "--retry-reason": dict(
        multiple=True,
        metavar="REASON",
        help="With --retry-failures: only URLs that failed for this reason. Repeatable.",
    ),
    "--image-store": dict(
        default=None,
        metavar="URI",
        help="Keep every fetched image here and look each URL up here before fetching it "
        "(a folder, gs://, s3://; shared between builds). Default: OUTPUT/image-store.",
    ),
    "--no-image-store": dict(
        is_flag=True,
        default=False,
        help="Keep no image store: fetch every image, keep none.",
    ),
    "--refetch-failures": dict(
        is_flag=True,
        default=False,
        help="Fetch again the URLs the image store records as failed with a retryable "
        "reason (timeout, connection error, 5xx, 429, robots.txt unavailable) or one that "
        "depends on a build's limits or on robots.txt (blocked address, too large, too many "
        "redirects, robots.txt disallowed: checked again first); never the opt-outs.",
    ),
    "--images-from": dict(
        default=None,
        metavar="DIR",
        help="Take images from this img2dataset download (output_format webdataset) "
        "before the store and the network.",
    ),
    "--images-absent": dict(
        type=click.Choice(["fetch", "drop"]),
        default="fetch",
        help="With --images-from: fetch the URLs the download lacks, or drop them "
        "(not_in_download).",
    ),
}


def fetch_options(command):
    for flag, options in reversed(FLAGS.items()):
        options = {"show_default": "default" in options and not options.get("is_flag"), **options}
        command = click.option(flag, flag.lstrip("-").replace("-", "_"), **options)(command)
    return command
