"""The hosts' robots.txt answers a store keeps, so that a rebuild does not ask again.

One small JSON file per origin, ``{store}/robots/{key}.json`` (the key: 32
hex digits of the SHA-256 of the origin, as for an image URL), holding a
:class:`~corpora.fetch.robots.RobotsAnswer`: the status, the text of a 2xx
and when it was fetched. Only lasting answers are kept (2xx, 4xx); a build
uses one for 24 hours (RFC 9309), then asks the host again.

    >>> import tempfile
    >>> from corpora.fetch.robots import RobotsAnswer
    >>> kept = RobotsFiles(Files(tempfile.mkdtemp()))
    >>> kept.save(RobotsAnswer("https://a.example", 200, "User-agent: *\\nDisallow: /x\\n", 7.0))
    >>> kept.load("https://a.example").body, kept.load("https://b.example")
    ('User-agent: *\\nDisallow: /x\\n', None)
"""

from __future__ import annotations

from corpora.fetch.robots import RobotsAnswer
from corpora.store.files import Files
from corpora.store.keys import image_key

ROBOTS = "robots"  # {root}/robots/{key}.json


class RobotsFiles:
    """A :class:`~corpora.fetch.robots.RobotsBook` keeper in a store's files."""

    def __init__(self, files: Files):
        self.files = files

    def path(self, origin: str) -> str:
        return f"{ROBOTS}/{image_key(origin)}.json"

    def load(self, origin: str) -> RobotsAnswer | None:
        try:
            answer = RobotsAnswer.from_json(self.files.read(self.path(origin)))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None  # none yet, or unreadable: ask the host
        return answer if answer.origin == origin else None

    def save(self, answer: RobotsAnswer) -> None:
        self.files.write(self.path(answer.origin), answer.to_json())
