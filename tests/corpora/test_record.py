import subprocess
import sys

from corpora.record import stable_hash, stable_id


def test_stable_hash_is_the_same_in_another_process():
    here = stable_hash("mmc4-abc")
    there = subprocess.run(
        [
            sys.executable,
            "-c",
            "from corpora.record import stable_hash; print(stable_hash('mmc4-abc'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert str(here) == there


def test_stable_id_depends_on_every_part():
    assert stable_id("a", 1) == stable_id("a", 1)
    assert stable_id("a", 1) != stable_id("a", 2)
    assert stable_id("a", "1b") != stable_id("a1", "b")
