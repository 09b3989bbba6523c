"""docs/image-store.md matches the code: the parquet columns and the
retryable reasons it lists are the store's."""

import os
import re

from corpora.store.outcomes import RETRYABLE
from corpora.store.writer import ROW_COLUMNS
from tests.helpers import REPO

DOC = open(os.path.join(REPO, "docs", "image-store.md"), encoding="utf-8").read()


def test_the_parquet_table_lists_every_column_in_order():
    table = DOC.split("| column | on success | on failure |", 1)[1].split("\n\n", 1)[0]
    assert tuple(re.findall(r"^\| `([a-z_0-9]+)` \|", table, re.M)) == ROW_COLUMNS


def test_the_retryable_reasons_are_the_stores():
    sentence = DOC.split("are *retryable*", 1)[0].rsplit("Timeouts", 1)[1]
    assert set(re.findall(r"`([a-z_0-9]+)`", sentence)) == RETRYABLE
