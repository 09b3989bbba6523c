from __future__ import annotations

import dataclasses
import os
import re

import pytest

from corpora import fetch
from corpora.fetch.settings import TRANSIENT
from tests.corpora.fetch.common import FAST
from tests.helpers import REPO


@pytest.mark.parametrize(
    "change",
    [
        {"resize_mode": "stretch"},
        {"jpeg_quality": 0},
        {"concurrency": 0},
        {"per_host_concurrency": 0},
        {"read_timeout": 0},
        {"allow_networks": ("not-a-network",)},
        {"max_aspect_ratio": 0.5},
    ],
)
def test_settings_reject_bad_values(change):
    with pytest.raises(ValueError):
        dataclasses.replace(FAST, **change)


def test_transient_reasons_are_reasons():
    assert TRANSIENT <= set(fetch.REASONS)


def test_docs_list_every_reason():
    with open(os.path.join(REPO, "docs", "fetch.md"), encoding="utf-8") as handle:
        table = [line for line in handle if line.startswith("| `")]
    documented = {
        name for line in table for name in re.findall(r"`([a-z_0-9]+)`", line.split("|")[1])
    }
    assert set(fetch.REASONS) <= documented
