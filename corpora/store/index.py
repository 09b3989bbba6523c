"""Looking URLs up: a store's committed rows as one answer per URL, on disk."""

from __future__ import annotations

import hashlib
import io
import sqlite3
from typing import Any, Iterable, Iterator

from corpora.store.files import Files
from corpora.store.outcomes import UNKNOWN, Failed, ImageRef, Outcome, Stored, Unknown, resolve


def outcome_from_row(row: dict[str, Any], tar_url: str) -> Outcome:
    """The outcome a parquet row records; ``tar_url`` is its part's tar."""
    if row["status"] == "success":
        ref = ImageRef(tar_url, int(row["offset"]), int(row["size"]), row["sha256"])
        return Stored(
            row["url"],
            row["key"],
            ref,
            int(row["width"]),
            int(row["height"]),
            row["format"],
            row["http_status"],
        )
    return Failed(row["url"], row["reason"], row["http_status"], row["detail"] or "")


def read_part(files: Files, directory: str, part: str) -> Iterator[tuple[float, Outcome]]:
    """``(time recorded, outcome)`` for every row of a committed part."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(files.read(f"{directory}/{part}.parquet")))
    tar_url = files.url(f"{directory}/{part}.tar")  # one string shared by the part's refs
    for row in table.to_pylist():
        yield row["time"], outcome_from_row(row, tar_url)


class StoreIndex:
    """One outcome per URL (:func:`~corpora.store.outcomes.resolve` over its rows),
    kept on disk, so that memory does not grow with the URLs it holds.

    The rows live in a private temporary SQLite database (deleted when the
    index is closed or collected), keyed by the first 16 bytes of the URL's
    SHA-256, with each tar URL written once: about 130 bytes of disk a URL,
    and SQLite's page cache (:data:`CACHE_KIB`) in memory whatever the count.
    A fetch worker's index of the URLs it has fetched, or of a 5.5 M-row COYO
    file's store, is as small in memory as one of ten URLs.

    >>> index = StoreIndex([(2.0, Failed("u", "timeout")), (1.0, Failed("u", "http_404"))])
    >>> index.lookup("u").reason, len(index), "u" in index, "v" in index
    ('timeout', 1, True, False)
    >>> index.add(3.0, Stored("u", "k", ImageRef("a.tar", 512, 10, "00" * 32), 4, 3, "JPEG", 200))
    >>> index.lookup("u")  # doctest: +NORMALIZE_WHITESPACE
    Stored(url='u', key='k', ref=ImageRef(tar='a.tar', offset=512, size=10,
           sha256='0000000000000000000000000000000000000000000000000000000000000000'),
           width=4, height=3, format='JPEG', status=200)
    >>> index.counts()
    {'stored': 1, 'failed_retryable': 0, 'failed_final': 0}
    """

    def __init__(self, rows: Iterable[tuple[float, Outcome]] = ()):
        # "": a private temporary database, in the page cache until it spills to
        # a file of its own that SQLite removes when the connection closes.
        # A DoFn's bundles may run on different threads, one at a time.
        self._db = sqlite3.connect("", check_same_thread=False, isolation_level=None)
        self._db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute(_CREATE_TARS)
        self._db.execute(_CREATE_ROWS)
        self._tars: dict[str, int] = {}  # one per part: grows with parts, not URLs
        self._tar_urls: dict[int, str] = {}
        self._db.execute("BEGIN")
        for when, outcome in rows:
            self.add(when, outcome)
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    def _tar_id(self, tar: str) -> int:
        found = self._tars.get(tar)
        if found is None:
            found = self._tars[tar] = len(self._tars)
            self._tar_urls[found] = tar
            self._db.execute("INSERT INTO tars VALUES (?, ?)", (found, tar))
        return found

    def _row(self, when: float, outcome: Outcome) -> tuple:
        digest = _digest(outcome.url)
        if isinstance(outcome, Stored):
            ref = outcome.ref
            return (digest, when, outcome.key, self._tar_id(ref.tar), ref.offset, ref.size,
                    bytes.fromhex(ref.sha256), outcome.width, outcome.height, outcome.format,
                    None, outcome.status, None)  # fmt: skip
        return (digest, when, None, None, None, None, None, None, None, None,
                outcome.reason, outcome.status, outcome.detail)  # fmt: skip

    def _outcome(self, url: str, row: tuple) -> tuple[float, Outcome]:
        when, key, tar, offset, size, sha256, width, height, kind, reason, status, detail = row
        if reason is None:
            ref = ImageRef(self._tar_urls[tar], offset, size, sha256.hex())
            return when, Stored(url, key, ref, width, height, kind, status)
        return when, Failed(url, reason, status, detail)

    def _find(self, url: str) -> tuple[float, Outcome] | None:
        row = self._db.execute(_SELECT, (_digest(url),)).fetchone()
        return None if row is None else self._outcome(url, row)

    def add(self, when: float, outcome: Outcome) -> None:
        row = self._row(when, outcome)
        if self._db.execute(_INSERT, row).rowcount:
            return
        current = self._find(outcome.url)
        assert current is not None
        if resolve([current, (when, outcome)]) is not current[1]:
            self._db.execute(_REPLACE, row)

    def lookup(self, url: str) -> Stored | Failed | Unknown:
        found = self._find(url)
        return UNKNOWN if found is None else found[1]

    def __len__(self) -> int:
        return self._db.execute("SELECT count(*) FROM rows").fetchone()[0]

    def __contains__(self, url: object) -> bool:
        if not isinstance(url, str):
            return False
        return self._db.execute(_EXISTS, (_digest(url),)).fetchone() is not None

    def counts(self) -> dict[str, int]:
        """URLs stored and failed (retryable or not)."""
        counts = {"stored": 0, "failed_retryable": 0, "failed_final": 0}
        for reason, count in self._db.execute(_COUNTS):
            if reason is None:
                counts["stored"] += count
            elif Failed("", reason).retryable:
                counts["failed_retryable"] += count
            else:
                counts["failed_final"] += count
        return counts


CACHE_KIB = 8192  # SQLite's page cache of one index: 8 MiB at most


def _digest(url: str) -> bytes:
    # 128 bits: a collision among 10^12 URLs has odds below 10^-14
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).digest()[:16]


_CREATE_TARS = "CREATE TABLE tars (id INTEGER PRIMARY KEY, url TEXT NOT NULL)"
_CREATE_ROWS = """CREATE TABLE rows (
    digest BLOB PRIMARY KEY, time REAL, key TEXT, tar INTEGER, offset INTEGER, size INTEGER,
    sha256 BLOB, width INTEGER, height INTEGER, format TEXT,
    reason TEXT, status INTEGER, detail TEXT
) WITHOUT ROWID"""
_COLUMNS = "time, key, tar, offset, size, sha256, width, height, format, reason, status, detail"
_SELECT = f"SELECT {_COLUMNS} FROM rows WHERE digest = ?"
_EXISTS = "SELECT 1 FROM rows WHERE digest = ?"
_INSERT = f"INSERT OR IGNORE INTO rows (digest, {_COLUMNS}) VALUES ({', '.join('?' * 13)})"
_REPLACE = f"REPLACE INTO rows (digest, {_COLUMNS}) VALUES ({', '.join('?' * 13)})"
_COUNTS = "SELECT reason, count(*) FROM rows GROUP BY reason"
