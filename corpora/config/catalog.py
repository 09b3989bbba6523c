"""The corpora `corpora build` knows: every spec found in the source packages.

Every module of ``corpora/sources/`` that defines ``SPECS`` (a tuple of
:class:`corpora.config.spec.CorpusSpec`) adds its corpora; adding a corpus is adding
such a module, nothing else. Packages outside this repository are searched
the same way when the environment variable ``CORPORA_SOURCES`` names them
(comma-separated importable package names; the workers of a build must be
able to import them too).

>>> sorted(CORPORA)
['c4', 'coyo', 'mmc4', 'mmc4-pairs', 'mmc4-reordered', 'wit']
>>> get("mmc4").unit, get("mmc4").clip
('document', 'documents')
>>> option_users("reassign")
('mmc4', 'mmc4-pairs', 'mmc4-reordered')
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from typing import Iterable

from corpora.config.spec import CorpusSpec, Option

BUILTIN_SOURCES = "corpora.sources"
SOURCES_ENV = "CORPORA_SOURCES"


def source_packages() -> tuple[str, ...]:
    """The packages searched for specs: the built-in one, then ``CORPORA_SOURCES``'s."""
    named = (name.strip() for name in os.environ.get(SOURCES_ENV, "").split(","))
    return (BUILTIN_SOURCES, *(name for name in named if name and name != BUILTIN_SOURCES))


def discover(packages: Iterable[str]) -> dict[str, CorpusSpec]:
    """Every spec of every module of ``packages``, by corpus name (sorted)."""
    found: dict[str, tuple[CorpusSpec, str]] = {}
    for package_name in packages:
        try:
            package = importlib.import_module(package_name)
        except ImportError as exc:
            raise ImportError(
                f"{SOURCES_ENV} names {package_name}, which cannot be imported: {exc}"
            )
        for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            module_name = f"{package_name}.{module_info.name}"
            module = importlib.import_module(module_name)
            for spec in getattr(module, "SPECS", ()):
                if spec.name in found:
                    raise ValueError(
                        f"corpus {spec.name} is defined twice: in {found[spec.name][1]} "
                        f"and {module_name}"
                    )
                found[spec.name] = (spec, module_name)
    corpora = {name: found[name][0] for name in sorted(found)}
    _check_shared_options(corpora)
    return corpora


def _check_shared_options(corpora: dict[str, CorpusSpec]) -> None:
    # One flag serves every corpus with an option of its name, so they must agree.
    seen: dict[str, tuple[Option, str]] = {}
    for name, spec in corpora.items():
        for option in spec.options:
            first = seen.setdefault(option.name, (option, name))
            if first[0] != option:
                raise ValueError(
                    f"option {option.flag} is declared differently by {first[1]} and {name}"
                )


CORPORA: dict[str, CorpusSpec] = discover(source_packages())


def get(name: str) -> CorpusSpec:
    try:
        return CORPORA[name]
    except KeyError:
        raise KeyError(f"unknown corpus {name!r}; one of: {', '.join(CORPORA)}") from None


def options() -> dict[str, Option]:
    """Every corpus option of the catalog by name, in order of first appearance."""
    found: dict[str, Option] = {}
    for spec in CORPORA.values():
        for option in spec.options:
            found.setdefault(option.name, option)
    return found


def option_users(name: str) -> tuple[str, ...]:
    """The corpora that take the option ``name``."""
    return tuple(corpus for corpus, spec in CORPORA.items() if spec.option(name) is not None)


def clip_corpora(use: str) -> tuple[str, ...]:
    """The corpora the CLIP stage scores as ``use`` (:data:`corpora.config.spec.CLIP_PAIRS` or
    :data:`corpora.config.spec.CLIP_DOCUMENTS`)."""
    return tuple(corpus for corpus, spec in CORPORA.items() if spec.clip == use)
