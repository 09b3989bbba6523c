"""One writer per output (issue 16, defect 3): real processes race for one
folder's lock; stale locks of dead processes are taken over. The leases on
object stores: tests/corpora/lock/test_leases.py."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys

import pytest

from corpora.lock import output as output_lock
from corpora.lock.output import LOCK_NAME, Holder, LockError, LockLost, OutputLocked, acquire
from tests.beam_services import python_env

# A build stand-in: takes the lock when told "go", holds it until told "release".
CONTENDER = """
import os, sys
from corpora.lock.output import OutputLocked, acquire
sys.stdin.readline()
try:
    lock = acquire(sys.argv[1])
except OutputLocked as exc:
    print("locked", exc, flush=True)
    sys.exit(2)
print("held", os.getpid(), flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
"""

# Takes the lock and dies without giving it back.
ABANDONER = """
import os, sys
from corpora.lock.output import acquire
lock = acquire(sys.argv[1])
print(os.getpid(), flush=True)
os._exit(0)
"""


def _spawn(script: str, output: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, output],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )


def _dead_pid(output: str) -> int:
    """Leave a lock in ``output`` from a process that has exited (and been reaped)."""
    child = _spawn(ABANDONER, output)
    out, err = child.communicate()
    assert child.returncode == 0, err
    return int(out)


def _lines() -> tuple[list[str], object]:
    said: list[str] = []
    return said, said.append


@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_racing_for_one_output_one_holds_the_other_is_named_the_holder(
    tmp_path, attempt
):
    output = str(tmp_path / "out")
    first, second = _spawn(CONTENDER, output), _spawn(CONTENDER, output)
    for child in (first, second):
        child.stdin.write("go\n")
        child.stdin.flush()
    replies = {child: child.stdout.readline().split() for child in (first, second)}
    holders = [child for child, words in replies.items() if words[:1] == ["held"]]
    assert len(holders) == 1, replies
    (holder,) = holders
    (loser,) = [child for child in (first, second) if child is not holder]
    _, loser_err = loser.communicate()
    message = " ".join(replies[loser])
    assert loser.returncode == 2, loser_err
    assert f"pid {holder.pid} on {socket.gethostname()}" in message
    assert os.path.join(output, LOCK_NAME) in message
    holder.stdin.write("release\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "released"
    assert holder.wait() == 0
    assert not os.path.exists(os.path.join(output, LOCK_NAME))
    assert os.listdir(output) == []  # no private names left behind


def test_a_second_holder_in_this_process_is_refused_and_release_frees_the_output(tmp_path):
    output = str(tmp_path)
    lock = acquire(output, clock=lambda: 1764525600.0)
    since = "since 2025-11-30 18:00:00 UTC"
    assert lock.holder.describe() == f"pid {os.getpid()} on {socket.gethostname()}, {since}"
    written = json.loads((tmp_path / LOCK_NAME).read_text())
    assert (written["host"], written["pid"]) == (socket.gethostname(), os.getpid())
    assert written["token"] == lock.holder.token
    with pytest.raises(OutputLocked) as caught:
        acquire(output)
    assert caught.value.holder == lock.holder
    assert "\n" not in str(caught.value)
    # a takeover that finds another lock than the stale one it judged leaves it in place
    assert not output_lock._LocalLock(output).delete(b"the stale lock it judged")
    assert Holder.parse((tmp_path / LOCK_NAME).read_bytes()) == lock.holder
    assert os.listdir(tmp_path) == [LOCK_NAME]
    lock.release()
    lock.release()  # giving back twice is harmless
    with acquire(output):
        assert (tmp_path / LOCK_NAME).exists()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_lock_of_a_dead_process_on_this_host_is_taken_over_with_a_line(tmp_path):
    output = str(tmp_path)
    dead = _dead_pid(output)
    said, say = _lines()
    with acquire(output, say=say) as lock:
        assert lock.holder.pid == os.getpid()
    assert len(said) == 1
    assert said[0].startswith(f"Took over the stale lock {tmp_path / LOCK_NAME}: pid {dead} on ")
    assert said[0].endswith(f"pid {dead} is no longer running.")


def test_a_pid_that_now_belongs_to_another_process_is_stale(tmp_path):
    here = Holder.here()
    if here.process_start < 0:
        pytest.skip("no /proc on this system")
    _write_lock(tmp_path, pid=os.getpid(), process_start=here.process_start - 1)
    said, say = _lines()
    with acquire(str(tmp_path), say=say):
        pass
    assert said and said[0].endswith(f"pid {os.getpid()} is now another process.")


def _write_lock(folder, **changes) -> Holder:
    holder = Holder.here()
    holder = Holder(**{**holder.__dict__, **changes})
    (folder / LOCK_NAME).write_bytes(holder.to_bytes())
    return holder


def test_a_lock_from_another_host_is_never_taken_over(tmp_path):
    holder = _write_lock(tmp_path, host="builder-7.example", pid=1)
    with pytest.raises(OutputLocked) as caught:
        acquire(str(tmp_path))
    assert "pid 1 on builder-7.example" in str(caught.value)
    assert f"remove {tmp_path / LOCK_NAME} if no build is writing" in str(caught.value)
    assert Holder.parse((tmp_path / LOCK_NAME).read_bytes()) == holder


def test_a_lock_from_another_pid_namespace_is_not_judged(tmp_path):
    _write_lock(tmp_path, pid=_dead_pid(str(tmp_path / "other")), pid_namespace="pid:[1]")
    with pytest.raises(OutputLocked):
        acquire(str(tmp_path))


def test_a_lock_from_before_this_machine_restarted_is_stale(tmp_path):
    if not Holder.here().boot_id:
        pytest.skip("no boot id on this system")
    _write_lock(tmp_path, pid=os.getpid(), boot_id="00000000-0000-0000-0000-000000000000")
    said, say = _lines()
    with acquire(str(tmp_path), say=say):
        pass
    assert said[0].endswith("has restarted since.")


def test_a_live_process_keeps_its_lock(tmp_path):
    child = _spawn(CONTENDER, str(tmp_path))
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().split() == ["held", str(child.pid)]
    with pytest.raises(OutputLocked, match=f"pid {child.pid} on "):
        acquire(str(tmp_path))
    child.stdin.write("release\n")
    child.stdin.flush()
    assert child.wait() == 0


def test_a_lock_with_fields_of_a_later_version_still_names_its_holder(tmp_path):
    holder = Holder.here()
    fields = {**json.loads(holder.to_bytes()), "lease_seconds": 30}
    (tmp_path / LOCK_NAME).write_text(json.dumps(fields))
    with pytest.raises(OutputLocked) as caught:
        acquire(str(tmp_path))
    assert caught.value.holder == holder


@pytest.mark.parametrize(
    "content", [b"", b"not json\n", b'{"host": "x"}\n', b"[1, 2]\n", b'{"pid": "1"}\n']
)
def test_a_lock_file_naming_no_holder_is_left_alone(tmp_path, content):
    (tmp_path / LOCK_NAME).write_bytes(content)
    with pytest.raises(OutputLocked, match="a lock file that names no holder"):
        acquire(str(tmp_path))
    assert (tmp_path / LOCK_NAME).read_bytes() == content


def test_a_lock_replaced_while_held_is_reported_at_release(tmp_path):
    lock = acquire(str(tmp_path))
    intruder = _write_lock(tmp_path, token="someone-else")
    with pytest.raises(LockLost, match="removed or replaced while this build held it"):
        lock.release()
    assert Holder.parse((tmp_path / LOCK_NAME).read_bytes()) == intruder  # left in place


def test_without_hard_links_the_lock_is_created_exclusively(tmp_path, monkeypatch):
    def no_links(source, target):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(output_lock.os, "link", no_links)
    lock = acquire(str(tmp_path))
    assert Holder.parse((tmp_path / LOCK_NAME).read_bytes()) == lock.holder
    with pytest.raises(OutputLocked):
        acquire(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [LOCK_NAME]
    # a takeover that finds a new lock in place of the stale one puts it back without links
    store = output_lock._LocalLock(str(tmp_path))
    assert not store.delete(b"the stale lock it judged")
    assert Holder.parse((tmp_path / LOCK_NAME).read_bytes()) == lock.holder
    assert sorted(os.listdir(tmp_path)) == [LOCK_NAME]
    lock.release()
    assert os.listdir(tmp_path) == []


def test_an_output_on_another_scheme_is_an_error():
    with pytest.raises(LockError, match="cannot lock an output on hf://"):
        acquire("hf://datasets/x/y")
