"""The optional dependencies (the extras of ``pyproject.toml``) and the one
line that says how to install one that is missing.

Every module that needs an extra's package turns the ``ImportError`` into
:func:`missing_extra`'s error, so the fix is named the same way everywhere,
and named right: ``corpora`` on the public index is another project, so the
extras install from a clone (``pip install '.[train]'``). torch's default
wheels on Linux are the CUDA build, with gigabytes of ``nvidia-*`` wheels; a
machine without a GPU takes the CPU build from PyTorch's own index.

>>> print(missing_extra("train", "the trainer", ModuleNotFoundError(name="torch")))
the trainer needs torch, from the train extra: pip install '.[train]' in the corpora clone (no GPU: add --extra-index-url https://download.pytorch.org/whl/cpu)
>>> print(missing_extra("s3", "an s3:// output", ModuleNotFoundError(name="boto3")))
an s3:// output needs boto3, from the s3 extra: pip install '.[s3]' in the corpora clone
>>> require_extra("train", "the trainer", "a_module_nobody_has")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
corpora.config.extras.MissingExtra: the trainer needs a_module_nobody_has, from the train extra: ...
"""  # noqa: E501

from __future__ import annotations

import importlib

EXTRAS = ("clip", "train", "dev", "dataflow", "s3", "dask", "all")
# Extras that bring torch, whose default Linux wheels are the CUDA build.
WITH_TORCH = frozenset({"clip", "train", "all"})
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is one line that names the extra."""


def missing_extra(extra: str, needs: str, exc: ImportError) -> MissingExtra:
    """The error to raise when ``needs`` (what the user asked for) could not
    import a package of ``extra``: ``raise missing_extra(...) from None``."""
    if extra not in EXTRAS:
        raise ValueError(f"no such extra: {extra} (one of {', '.join(EXTRAS)})")
    package = exc.name or str(exc)
    cpu = f" (no GPU: add --extra-index-url {CPU_TORCH_INDEX})" if extra in WITH_TORCH else ""
    return MissingExtra(
        f"{needs} needs {package}, from the {extra} extra: "
        f"pip install '.[{extra}]' in the corpora clone{cpu}"
    )


def require_extra(extra: str, needs: str, *modules: str) -> None:
    """Import ``modules`` now, at the start of what ``needs`` them, or raise
    :func:`missing_extra`'s error."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_extra(extra, needs, exc) from None
