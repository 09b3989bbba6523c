"""What an image fetch is asked to do (:class:`FetchSettings`) and what each
URL ends as (:class:`ImageOutcome`): the final JPEG, or exactly one reason
from :data:`REASONS` (or ``http_<status>`` for any other non-2xx status)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re

from corpora import MAX_IMAGE_SIZE, __version__
from corpora.fetch.robots import ROBOTS_TOKEN

# What every request says we are: the tool, its version, that it honours
# robots.txt (and under which token); --contact adds the operator's address.
USER_AGENT = f"{ROBOTS_TOKEN}/{__version__} (multimodal corpus builder; honours robots.txt)"
RESIZE_MODES = ("no", "border", "keep_ratio", "keep_ratio_largest", "center_crop")

# Every reason an image can fail with (the manifest's ``images.failed`` keys),
# besides ``http_<status>`` for any other non-2xx status (``http_404`` …).
REASONS = (
    "bad_scheme",
    "bad_url",
    "bad_redirect",
    "blocked_address",
    "dns_error",
    "connection_error",
    "tls_error",
    "timeout",
    "too_many_redirects",
    "http_5xx",
    "http_429",
    "opted_out",
    "tdm_reserved",
    "robots_disallowed",
    "robots_unavailable",
    "too_large",
    "empty_body",
    "not_image",
    "decode_error",
    "too_many_pixels",
    "image_too_small",
    "aspect_ratio_above_max",
    "local_file",
    "file_not_found",
    "file_error",
)
# Failures worth another attempt after a pause; every other reason is final.
TRANSIENT = frozenset({"connection_error", "http_5xx", "http_429"})
# Failures that this build's own settings decide, not the server's answer, and
# what lets each through: the image store keeps none of them (another build may
# allow the URL), and a build that keeps nothing names the likeliest fix.
SETTINGS_REASONS = {
    "local_file": "add --allow-local-files DIR",
    "blocked_address": "add --allow-private-urls (or --allow-network CIDR)",
    "too_large": "raise --max-image-bytes",
    "too_many_redirects": "the redirect cap (5) is fixed",
}
_HTTP_STATUS = re.compile(r"^http_(\d{3}|\dxx)$")


def is_fetch_reason(reason: str) -> bool:
    """Is ``reason`` one an image fetch ends in? (the statistics count these
    as images that failed to fetch).

    >>> [is_fetch_reason(r) for r in ("http_404", "opted_out", "bad_url", "bad_json")]
    [True, True, True, False]
    """
    return reason in REASONS or bool(_HTTP_STATUS.match(reason))


def honest_agent(user_agent: str, contact: str = "") -> str:
    """The User-Agent a build sends: ``user_agent`` with the ``corpora``
    token kept (appended to one that lacks it, so robots.txt groups and
    X-Robots-Tag directives for ``corpora`` still reach us) and ``contact``
    added once.

    >>> honest_agent(USER_AGENT, "mailto:data@lab.example")
    'corpora/0.1.0 (multimodal corpus builder; honours robots.txt; +mailto:data@lab.example)'
    >>> honest_agent("labbot/2.0 (+https://lab.example/bot)")
    'labbot/2.0 (+https://lab.example/bot) corpora/0.1.0'
    >>> honest_agent(honest_agent("labbot/2.0", "x@lab.example"), "x@lab.example")
    'labbot/2.0 corpora/0.1.0 (+x@lab.example)'
    """
    agent = " ".join(user_agent.split()) or USER_AGENT
    tokens = [word.split("/", 1)[0].lower() for word in agent.split()]
    if ROBOTS_TOKEN not in tokens:
        agent = f"{agent} {ROBOTS_TOKEN}/{__version__}"
    contact = contact.strip()
    if contact and contact not in agent:
        if agent.endswith(")") and agent.startswith(f"{ROBOTS_TOKEN}/"):
            agent = f"{agent[:-1]}; +{contact})"
        else:
            agent = f"{agent} (+{contact})"
    return agent


@dataclasses.dataclass(frozen=True)
class FetchSettings:
    image_size: int = 256
    resize_mode: str = "center_crop"
    resize_only_if_bigger: bool = False
    jpeg_quality: int = 95
    connect_timeout: float = 10.0
    read_timeout: float = 20.0
    total_timeout: float = 60.0  # one attempt, headers to last byte
    max_bytes: int = 32 << 20
    max_redirects: int = 5
    min_image_size: int = 0
    max_aspect_ratio: float = 64.0  # banners and separators past this; bounds the resize
    max_pixels: int = 89_478_485  # Pillow's decompression-bomb threshold
    allow_private_urls: bool = False
    # CIDRs let through the address guard, e.g. an internal mirror
    allow_networks: tuple[str, ...] = ()
    # directories (absolute, links resolved) whose regular files a file:// URL or a
    # plain path may name; empty: every local file is refused as local_file
    allow_local_files: tuple[str, ...] = ()
    user_agent: str = USER_AGENT  # made honest: see honest_agent
    contact: str = ""  # the operator's URL or e-mail address, added to the user agent
    concurrency: int = 64
    max_attempts: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    max_retry_after: float = 120.0  # a longer Retry-After gives up at once
    per_host_concurrency: int = 4
    per_host_rate: float = 10.0  # request starts per second per host; 0: unlimited
    # X-Robots-Tag and TDM reservations (robots.txt is honoured whatever this says)
    respect_opt_out: bool = True
    tdmrep: bool = False  # read each host's /.well-known/tdmrep.json (W3C TDMRep) as well
    decode_threads: int = 0  # 0: one per core
    # a failures.parquet: fetch only the records holding these URLs
    retry_failures: str | None = None
    retry_reasons: tuple[str, ...] = ()  # …only the URLs that failed for these reasons (empty: all)
    progress_interval: float = 10.0  # seconds between progress lines on stderr; 0: none
    # a perceptual hash of each image's decoded pixels (--dedup-images near, --decontaminate)
    perceptual_hash: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "user_agent", honest_agent(self.user_agent, self.contact))
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(
                f"unknown resize mode {self.resize_mode!r}; one of {', '.join(RESIZE_MODES)}"
            )
        if not 1 <= self.image_size <= MAX_IMAGE_SIZE:
            raise ValueError(f"image size must be in 1..{MAX_IMAGE_SIZE}, got {self.image_size}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg quality must be in 1..100, got {self.jpeg_quality}")
        for name in ("concurrency", "max_attempts", "per_host_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{name.replace('_', ' ')} must be at least 1, got {getattr(self, name)}"
                )
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(
                    f"{name.replace('_', ' ')} must be positive, got {getattr(self, name)}"
                )
        if not self.max_aspect_ratio >= 1:  # NaN too
            raise ValueError(f"max aspect ratio must be at least 1, got {self.max_aspect_ratio}")
        for name in ("per_host_rate", "progress_interval"):
            value = getattr(self, name)
            if not 0 <= value < float("inf"):  # NaN too
                what = name.replace("_", " ")
                raise ValueError(f"{what} must be a number at least 0, got {value}")
        for directory in self.allow_local_files:
            if not os.path.isabs(directory):
                raise ValueError(f"--allow-local-files needs an absolute path, got {directory!r}")
        for network in self.allow_networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"not an IP network: {network!r}") from None


@dataclasses.dataclass(frozen=True)
class ImageOutcome:
    """What became of one image URL: the final JPEG, or one reason.

    :func:`corpora.fetch.image.process_image` returns one without ``url``,
    ``status`` and ``attempts``; the scheduler fills those in.
    """

    url: str = ""
    data: bytes | None = None
    width: int = 0
    height: int = 0
    original_width: int = 0
    original_height: int = 0
    reason: str | None = None
    status: int | None = None
    attempts: int = 0
    detail: str = ""
    phash: int | None = None  # with FetchSettings.perceptual_hash (corpora.dedup.phash)
    source_sha256: str = ""  # of the body decoded (an image's), for the exact-duplicate rule

    @property
    def ok(self) -> bool:
        return self.reason is None
