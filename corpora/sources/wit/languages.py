"""WIT's language codes, and the check of a user's list of them.

A WIT row's ``language`` column holds the code of the Wikipedia it comes from
(``en``, ``de``, ``iw`` for Hebrew, ``fil``, ``nan``). A build keeps the rows
whose code the user lists, so a code that WIT never uses, or one typed in
another case, would silently keep nothing: :func:`parse_languages` refuses it.

>>> parse_languages("EN, de,fr")
('de', 'en', 'fr')
>>> try:
...     parse_languages("en,he,eng")
... except LanguageError as exc:
...     print(exc)
unknown WIT language codes: 'he' (WIT writes 'iw'), 'eng' (did you mean 'en'?)
"""

from __future__ import annotations

import difflib

# The codes in WIT's ``language`` column, as listed by the dataset card of
# wikimedia/wit_base (huggingface.co/datasets/wikimedia/wit_base, its
# ``language:`` metadata), which Wikimedia built from WIT's own rows; `lah`
# was added to Hugging Face's language tags for it (huggingface/datasets pull
# request 4286, "This language is present in Wikimedia's WIT"). The WIT paper
# (arXiv:2103.01913) counts 108 Wikipedia languages; this list has the 105
# that the card names.
WIT_LANGUAGES = frozenset(
    """
    af an ar arz ast az azb ba bar be bg bn br bs ca ce ceb ckb cs cv cy da de el en eo es et
    eu fa fi fil fr fy ga gl hi hr hsb ht hu hy ia id io is it iw ja jv ka kk kn ko la lah lb
    lmo lt lv mg mk ml mn mr ms my nan nds ne nl nn no nv oc pa pl pt qu ro ru sco si sk sl sq
    sr sv sw ta te tg th tr tt uk ur uz vec vi vo war xmf yue zh
    """.split()
)

# Codes for a language that WIT writes another way.
_WRITTEN_AS = {"he": "iw", "nb": "no", "tl": "fil", "zh-cn": "zh", "zh-tw": "zh"}


class LanguageError(ValueError):
    """A list of language codes that names one WIT does not have (one line)."""


def _unknown(code: str) -> str:
    if code in _WRITTEN_AS:
        return f"{code!r} (WIT writes {_WRITTEN_AS[code]!r})"
    close = difflib.get_close_matches(code, sorted(WIT_LANGUAGES), n=1, cutoff=0.6)
    return f"{code!r} (did you mean {close[0]!r}?)" if close else repr(code)


def parse_languages(value: str) -> tuple[str, ...]:
    """The WIT language codes of a comma-separated ``value``, lower-cased,
    sorted and without repeats; raises :class:`LanguageError` naming every
    code WIT does not have, or when ``value`` names none.

    >>> parse_languages(" ja , JA,ceb ")
    ('ceb', 'ja')
    """
    codes = [code.strip().lower() for code in value.split(",")]
    codes = [code for code in codes if code]
    if not codes:
        raise LanguageError(f"no language code in {value!r}")
    unknown = [code for code in dict.fromkeys(codes) if code not in WIT_LANGUAGES]
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise LanguageError(
            f"unknown WIT language code{plural}: {', '.join(_unknown(c) for c in unknown)}"
        )
    return tuple(sorted(set(codes)))
