from corpora.stats import figures as stats
from corpora.stats.figures import StatsAccumulator
from corpora.stats.table import format_table
from tests.corpora.stats.test_figures import split_corpus


def test_format_table_shows_the_headline_figures():
    acc = StatsAccumulator()
    for values in split_corpus():
        acc.add(values)
    table = format_table(
        stats.finalize(
            acc,
            {
                "corpus": "mmc4",
                "seq_len": 64,
                "tokens_per_image": 2,
                "funnel": {"unit": "document", "input": 13, "kept": 13},
            },
        )
    )
    lines = table.splitlines()
    assert lines[0] == "mmc4: seq_len 64, 2 tokens per image"
    assert any(
        line.split()[:4] == ["text", "tokens", "per", "image"] and line.split()[-1] == "122.5"
        for line in lines
    )
    assert any(line.startswith("documents split") and "1 (7.7%)" in line for line in lines)
    assert any(
        line.startswith("images with their text") and "pieces end in an image slot" in line
        for line in lines
    )
