"""One writer per output: a lock held in the output for a build's life.

Two builds writing one output interleave: one removes the shards the other
wrote, and the manifest that wins names files that are gone or settings that
shaped only half of them. So a build takes the output's lock before it touches
anything and gives it back when it ends; a second build gets
:class:`OutputLocked`, which names the holder (host, pid, start time).

The lock is ``corpora.lock`` in the output: a small JSON object naming its
holder (:class:`Holder`). In a local folder the holder writes it in full under
a private name and hard-links it into place; the link fails when the name
exists, so exactly one of two builds gets it and no one ever reads a
half-written lock (the exclusive create of ``O_EXCL``, which is the fallback
where a file system has no hard links). On ``s3://`` and ``gs://`` it is a
lease object (:mod:`corpora.lock.leases`).

A lock left by a build that no longer runs is taken over, with a line saying
so, when that can be known from here (:meth:`Holder.stale_because`); a
takeover removes the stale lock only if it is unchanged since it was judged.
A holder on another machine cannot be checked: the error says which file to
remove when no build is running there.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import socket
import sys
import time
import uuid
from typing import Any, Callable, Mapping

from corpora.lock import LOCK_NAME, LockError

_TAKEOVER_ATTEMPTS = 3


class OutputLocked(LockError):
    """Another build holds the output."""

    def __init__(self, location: str, holder: Holder | None):
        self.location = location
        self.holder = holder
        who = (
            f"another build ({holder.describe()})" if holder else "a lock file that names no holder"
        )
        super().__init__(
            f"{location} is held by {who}; wait for it to finish,"
            f" or remove {location} if no build is writing this output"
        )


class LockLost(LockError):
    """The lock was removed or replaced while this build held it."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lock, and what tells from this machine whether it still runs."""

    host: str
    pid: int
    started: float  # seconds since the epoch, when the lock was taken
    token: str
    boot_id: str = ""
    pid_namespace: str = ""
    process_start: int = -1  # clock ticks after boot (/proc/PID/stat); -1: unknown

    @classmethod
    def here(cls, clock: Callable[[], float] = time.time) -> Holder:
        pid = os.getpid()
        start = _process_start(pid)
        return cls(
            socket.gethostname(),
            pid,
            clock(),
            uuid.uuid4().hex,
            *_machine(),
            process_start=-1 if start is None else start,
        )

    def to_bytes(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode("utf-8") + b"\n"

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        """The holder a lock names, or ``None`` when it names none readably."""
        try:
            fields = json.loads(data)
            known = {f.name for f in dataclasses.fields(cls)}
            # fields a later version may add are ignored: builds of two versions share outputs
            holder = cls(**{k: v for k, v in fields.items() if k in known})
        except (ValueError, TypeError, AttributeError):
            return None
        valid = (
            isinstance(holder.host, str)
            and type(holder.pid) is int
            and isinstance(holder.started, (int, float))
            and type(holder.process_start) is int
            and all(
                isinstance(v, str) for v in (holder.token, holder.boot_id, holder.pid_namespace)
            )
        )
        return holder if valid else None

    def describe(self) -> str:
        when = datetime.datetime.fromtimestamp(self.started, datetime.timezone.utc)
        return f"pid {self.pid} on {self.host}, since {when:%Y-%m-%d %H:%M:%S} UTC"

    def stale_because(self) -> str | None:
        """Why the build that took this lock cannot be running any more, or
        ``None`` when it may be (or that cannot be known from here)."""
        host, (boot_id, pid_namespace) = socket.gethostname(), _machine()
        if self.host != host:
            return None
        if self.boot_id and boot_id and self.boot_id != boot_id:
            return f"{host} has restarted since"
        if self.pid_namespace != pid_namespace:
            return None  # another container with the same host name: its pids are not ours
        started = _process_start(self.pid)
        if started is None:
            return f"pid {self.pid} is no longer running"
        # Ticks after boot, not wall time: a clock set back cannot make a live build look stale.
        if started >= 0 and self.process_start >= 0 and started != self.process_start:
            return f"pid {self.pid} is now another process"
        return None


def _read_text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _machine() -> tuple[str, str]:
    """This machine's boot id and this process's pid namespace ("" where unknown)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return _read_text("/proc/sys/kernel/random/boot_id"), namespace


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (-1 when it runs
    but that is unknown), or ``None`` when no such process runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # another user's process: it exists
    stat = _read_text(f"/proc/{pid}/stat")
    if not stat:
        return -1
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):  # a zombie has exited; only its exit status is left
        return None
    return int(fields[19])


# ---------------------------------------------------------------- where the lock lives


class _LocalLock:
    def __init__(self, output: str):
        self.folder = output[len("file://") :] if output.startswith("file://") else output
        self.location = os.path.join(self.folder, LOCK_NAME)

    def create(self, data: bytes) -> Any | None:
        """Write ``data`` as the lock unless one exists; its version, or ``None``."""
        os.makedirs(self.folder, exist_ok=True)
        private = f"{self.location}.{uuid.uuid4().hex}.new"
        _write_new(private, data)
        try:
            os.link(private, self.location)
            return data
        except FileExistsError:
            return None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            try:  # no hard links here: create the name exclusively, then fill it
                _write_new(self.location, data)
            except FileExistsError:
                return None
            return data
        finally:
            os.unlink(private)

    def read(self) -> tuple[bytes, Any] | None:
        try:
            with open(self.location, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        return data, data

    def delete(self, version: Any) -> bool:
        """Remove the lock if it is still ``version``; whether it was removed."""
        aside = f"{self.location}.{uuid.uuid4().hex}.old"
        try:
            os.rename(self.location, aside)  # atomic: now no one else can act on it
        except FileNotFoundError:
            return False
        with open(aside, "rb") as handle:
            moved = handle.read()
        if moved != version:
            # A new lock was taken since it was judged: put it back. Should a third build
            # take the free name in this instant, the one moved loses its lock and finds
            # out at release (LockLost), never silently.
            try:
                os.link(aside, self.location)
            except FileExistsError:
                pass
            except OSError:  # no hard links here
                try:
                    _write_new(self.location, moved)
                except FileExistsError:
                    pass
        os.unlink(aside)
        return moved == version


def _write_new(path: str, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _store(output: str, s3_options: Mapping[str, Any] | None):
    scheme = output.split("://", 1)[0] if "://" in output else ""
    if scheme in ("", "file"):
        return _LocalLock(output)
    if scheme == "s3":
        from corpora.lock.leases import S3Lease

        return S3Lease(output, s3_options or {})
    if scheme == "gs":
        from corpora.lock.leases import GcsLease

        return GcsLease(output)
    raise LockError(f"cannot lock an output on {scheme}://: use a local folder, gs:// or s3://")


# ---------------------------------------------------------------- taking and giving back


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class OutputLock:
    """The lock of one output, held until :meth:`release` (or the ``with`` block ends)."""

    def __init__(self, store, holder: Holder, version: Any):
        self._store = store
        self.holder = holder
        self._version = version
        self.held = True

    @property
    def location(self) -> str:
        return self._store.location

    def release(self) -> None:
        """Remove the lock; raises :class:`LockLost` if it is no longer this build's."""
        if not self.held:
            return
        self.held = False
        if not self._store.delete(self._version):
            raise LockLost(f"{self.location} was removed or replaced while this build held it")

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(
    output: str,
    s3_options: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
    say: Callable[[str], None] = _stderr,
) -> OutputLock:
    """Take the lock of ``output`` (a local folder, ``s3://`` or ``gs://``), or
    raise :class:`OutputLocked` naming the build that holds it. A stale lock is
    taken over and ``say`` is told so in one line.

    >>> import shutil, tempfile
    >>> output = tempfile.mkdtemp()
    >>> with acquire(output) as lock:
    ...     try:
    ...         acquire(output)
    ...     except OutputLocked as exc:
    ...         print(exc.holder == lock.holder)
    True
    >>> shutil.rmtree(output)
    """
    store = _store(output, s3_options)
    holder = Holder.here(clock)
    data = holder.to_bytes()
    existing = None
    for _ in range(_TAKEOVER_ATTEMPTS):
        version = store.create(data)
        if version is not None:
            return OutputLock(store, holder, version)
        found = store.read()
        if found is None:
            continue  # given back between the two calls
        existing = Holder.parse(found[0])
        why = existing.stale_because() if existing else None
        if why is None:
            raise OutputLocked(store.location, existing)
        if store.delete(found[1]):
            say(f"Took over the stale lock {store.location}: {existing.describe()}; {why}.")
    raise OutputLocked(store.location, existing)
