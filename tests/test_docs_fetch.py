"""docs/fetch.md matches the code: the progress interval it states is the CLI's default."""

from __future__ import annotations

import os
import re

from corpora.config.flags import PROGRESS_EVERY
from tests.helpers import REPO

DOC = open(os.path.join(REPO, "docs", "fetch.md"), encoding="utf-8").read()


def test_the_progress_section_states_the_default_interval():
    # issue 32, finding 8: the page said 10 where the command line says 30
    section = DOC.split("\n## Progress\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"\(default (\d+)", section) == [f"{PROGRESS_EVERY:g}"]
