"""WIT (Srinivasan et al. 2021): its reader and spec (:mod:`.reader`) and the
language lists it filters on (:mod:`.languages`)."""

from corpora.sources.wit.reader import SPECS

__all__ = ["SPECS"]
