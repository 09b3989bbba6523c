"""docs/corpora.md matches the code: the `corpora list` block, every corpus,
every corpus flag and every drop reason the new readers can give."""

import os
import re

from corpora.config import catalog
from tests.helpers import REPO, run_cli

DOC = open(os.path.join(REPO, "docs", "corpora.md"), encoding="utf-8").read()


def test_list_block_is_the_command_output():
    assert DOC.split("```\n", 2)[1] == run_cli("list").stdout


def test_every_corpus_and_flag_is_documented():
    for name in catalog.CORPORA:
        assert f"\n## {name}\n" in DOC
    for option in catalog.options().values():
        assert f"`{option.flag}" in DOC, option.name


def test_every_drop_reason_in_the_new_modules_is_documented():
    sources = [
        "corpora/sources/coyo.py",
        "corpora/sources/c4.py",
        "corpora/sources/wit/reader.py",
        "corpora/sources/filters.py",
        "corpora/sources/mmc4/layouts.py",
        "corpora/sources/mmc4/reader.py",
    ]
    reasons = set()
    for path in sources:
        text = open(os.path.join(REPO, path), encoding="utf-8").read()
        reasons |= set(re.findall(r'Drop\(\s*"([a-z0-9_]+)"', text))
    missing = sorted(r for r in reasons if f"`{r}`" not in DOC)
    assert missing == []
