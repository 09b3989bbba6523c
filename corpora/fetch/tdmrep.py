"""TDM reservations a host declares in ``/.well-known/tdmrep.json`` (W3C TDMRep).

Read only where the user asks for it (``--tdmrep``), once per host like
robots.txt. The file is a JSON array of rules::

    [{"location": "/images/*", "tdm-reservation": 1, "tdm-policy": "https://…/policy"},
     {"location": "/", "tdm-reservation": 0}]

``location`` is a path pattern with robots.txt's syntax (``*`` any
characters, a final ``$`` the end of the path); the first rule whose
location matches a URL's path decides, and ``tdm-reservation: 1`` makes the
image ``tdm_reserved``, without a request. No file (any non-2xx answer, or
no answer), or a file that is no such array, reserves nothing: TDMRep's
other channel, the ``tdm-reservation`` header of each image, is read in
:mod:`corpora.fetch.attempt` either way.

    >>> rules = TdmRules.from_answer(200, b'[{"location": "/img/*.jpg$", "tdm-reservation": 1},'
    ...                                   b' {"location": "/", "tdm-reservation": 0}]')
    >>> rules.refusal("https://a.example/img/cat.jpg"), rules.refusal("https://a.example/img/x.png")
    ('tdm_reserved', None)
    >>> TdmRules.from_answer(404).refusal("https://a.example/img/cat.jpg") is None
    True
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse

WELL_KNOWN = "/.well-known/tdmrep.json"


def tdmrep_url(origin: str) -> str:
    """Where ``origin`` declares its reservations.

    >>> tdmrep_url("https://a.example")
    'https://a.example/.well-known/tdmrep.json'
    """
    return origin + WELL_KNOWN


def location_pattern(location: str) -> re.Pattern:
    """A ``location`` as a regular expression over a URL's path and query.

    >>> jpegs = location_pattern("/a/*.jpg$")
    >>> bool(jpegs.match("/a/b/c.jpg")), bool(jpegs.match("/a/c.jpgx"))
    (True, False)
    >>> bool(location_pattern("/a").match("/ab"))
    True
    """
    anchored = location.endswith("$")
    body = location[:-1] if anchored else location
    regex = ".*".join(re.escape(part) for part in body.split("*"))
    return re.compile(regex + ("$" if anchored else ""))


@dataclasses.dataclass(frozen=True)
class TdmRules:
    """An origin's rules: ``(pattern, reserved, policy)`` in the file's order."""

    rules: tuple[tuple[re.Pattern, bool, str], ...] = ()
    detail: str = ""

    @classmethod
    def from_answer(cls, status: int, data: bytes = b"") -> "TdmRules":
        if not 200 <= status < 300:
            return cls()
        try:
            declared = json.loads(data.decode("utf-8-sig"))
        except (UnicodeDecodeError, ValueError):
            return cls()
        rules = []
        for rule in declared if isinstance(declared, list) else ():
            if not isinstance(rule, dict) or not isinstance(rule.get("location"), str):
                continue
            reserved = str(rule.get("tdm-reservation", "0")).strip() == "1"
            rules.append((location_pattern(rule["location"]), reserved, rule.get("tdm-policy", "")))
        return cls(tuple(rules))

    def refusal(self, url: str) -> str | None:
        """``tdm_reserved`` when the first rule matching ``url``'s path reserves it."""
        parts = urllib.parse.urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for pattern, reserved, _ in self.rules:
            if pattern.match(path):
                return "tdm_reserved" if reserved else None
        return None
