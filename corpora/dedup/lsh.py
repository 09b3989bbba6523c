"""Near hashes found without comparing every pair: bands and components.

Banding (the pigeonhole principle): split the 64 bits into ``radius + 1``
bands; two hashes at most ``radius`` bits apart differ in at most ``radius``
bands, so at least one band is equal in both. A hash is filed under each of
its bands (:func:`band_keys`); only hashes sharing a bucket are compared
(:func:`near_pairs`), and a pair is reported from the first band it shares
only (:func:`first_shared_band`), so it is found once whatever the buckets'
order. Every pair within the radius is found: banding here loses nothing.

The pairs are then joined into clusters by connected components; the member
with the smallest key (record id, image position) is kept: a union-find
(:func:`union`, :func:`find`, :func:`merge`) that the Beam steps' combines
run on their pairs (:mod:`pipelines.dedup_images`, and
:mod:`pipelines.dedup_text` on its text pairs), with :func:`components` the
pure reference they are checked against.

>>> bands(3)  # (shift, width) of each band of a 64-bit hash, radius 3: 4 bands of 16 bits
((0, 16), (16, 16), (32, 16), (48, 16))
>>> a, b = 0x0000_0000_0000_0000, 0x0001_0000_0100_0001  # 3 bits apart
>>> first_shared_band(a, b, 3)  # bands 0, 1 and 3 differ; band 2 is equal
2
>>> near_pairs([("x", a), ("y", b), ("z", ~a & (1 << 64) - 1)], 3)
[('x', 'y')]
"""

from __future__ import annotations

import functools
from typing import Hashable, Iterable, Sequence

from corpora.dedup.phash import PHASH_BITS

ROWS = 256  # near_pairs: members compared at once, a ROWS x n table of distances


@functools.lru_cache(maxsize=64)
def bands(radius: int, bits: int = PHASH_BITS) -> tuple[tuple[int, int], ...]:
    """``radius + 1`` bands (shift, width) that cover ``bits``, as even as they go.

    >>> bands(4)
    ((0, 13), (13, 13), (26, 13), (39, 13), (52, 12))
    """
    count = radius + 1
    if not 1 <= count <= bits:
        raise ValueError(f"a radius must be in 0..{bits - 1}, got {radius}")
    widths = [bits // count + (1 if i < bits % count else 0) for i in range(count)]
    shifts = [sum(widths[:i]) for i in range(count)]
    return tuple(zip(shifts, widths))


def band_keys(value: int, radius: int) -> list[tuple[int, int]]:
    """The buckets ``value`` is filed under: (band index, the band's bits).

    >>> band_keys(0xFFFF_0000_0000_0001, 3)
    [(0, 1), (1, 0), (2, 0), (3, 65535)]
    """
    return [(index, (value >> shift) & mask) for index, shift, mask in _masks(radius)]


def band_bits(value: int, radius: int, band: int) -> int:
    """The bits of ``value`` in ``band``: its bucket in that band (what
    :func:`band_keys` gives for it).

    >>> band_bits(0xFFFF_0000_0000_0001, 3, 3), band_keys(0xFFFF_0000_0000_0001, 3)[3][1]
    (65535, 65535)
    """
    _, shift, mask = _masks(radius)[band]
    return (value >> shift) & mask


@functools.lru_cache(maxsize=64)
def _masks(radius: int) -> tuple[tuple[int, int, int], ...]:
    """(index, shift, mask) of each band: worked out once per radius, not per
    hash (a fetch files every image under each of its bands)."""
    return tuple((i, shift, (1 << width) - 1) for i, (shift, width) in enumerate(bands(radius)))


def first_shared_band(a: int, b: int, radius: int) -> int | None:
    """The first band in which ``a`` and ``b`` are equal, or None."""
    for index, shift, mask in _masks(radius):
        if (a >> shift) & mask == (b >> shift) & mask:
            return index
    return None


def near_pairs(
    members: Sequence[tuple[Hashable, int]], radius: int, band: int | None = None
) -> list[tuple]:
    """Pairs ``(key_a, key_b)``, ``key_a < key_b``, of ``members`` (key, hash)
    at most ``radius`` bits apart. ``band``: the bucket's band, whose pairs are
    reported only if it is the first band they share (each pair from one bucket).

    Compared with numpy, :data:`ROWS` members against all the others at a time
    (a bucket of n members costs n² XORs, in C, and n / ROWS numpy calls).
    """
    import numpy as np

    if len(members) < 2:
        return []
    members = sorted(members)
    hashes = np.array([h for _, h in members], dtype=np.uint64)
    pairs = []
    for start in range(0, len(members) - 1, ROWS):
        rows = hashes[start : start + ROWS]
        near = _popcount(rows[:, None] ^ hashes[None, :]) <= radius
        # only j > i: each pair once, in the order of (i, j)
        near &= np.arange(len(hashes))[None, :] > np.arange(start, start + len(rows))[:, None]
        for i, j in zip(*np.nonzero(near)):
            (key_a, hash_a), (key_b, hash_b) = members[start + int(i)], members[int(j)]
            if band is None or first_shared_band(hash_a, hash_b, radius) == band:
                pairs.append((key_a, key_b))
    return pairs


def _popcount(values):
    """Set bits of each uint64 (numpy 2's ``bitwise_count``, or by bytes before it)."""
    import numpy as np

    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(values)
    return np.unpackbits(values.view(np.uint8)).reshape(-1, 64).sum(axis=1)


def find(parent: dict, node: Hashable) -> Hashable:
    """``node``'s root in the union-find ``parent`` (node → a node nearer its
    root; a node not in it is its own root), compressing the path walked."""
    root = node
    while parent.get(root, root) != root:
        root = parent[root]
    while parent.get(node, node) != root:
        parent[node], node = root, parent[node]
    return root


def union(parent: dict, a: Hashable, b: Hashable) -> None:
    """Join ``a``'s and ``b``'s clusters in ``parent``, under the smaller root.

    The root is always a cluster's smallest member, so the clusters, and the
    roots that name them, do not depend on the order pairs are joined in or
    how unions made apart are merged (:func:`merge`): the Beam steps'
    union-find combines rely on it. Both nodes are in ``parent`` afterwards.

    >>> parent = {}
    >>> for a, b in [("d", "e"), ("b", "c"), ("e", "a")]:
    ...     union(parent, a, b)
    >>> sorted((node, find(parent, node)) for node in parent)
    [('a', 'a'), ('b', 'b'), ('c', 'b'), ('d', 'a'), ('e', 'a')]
    """
    a, b = find(parent, a), find(parent, b)
    parent.setdefault(a, a)
    parent.setdefault(b, b)
    if a != b:
        parent[max(a, b)] = min(a, b)


def merge(parents: Iterable[dict]) -> dict:
    """Union-finds made apart (:func:`union`) joined into one (the first,
    which it changes): what a union-find combine's accumulators merge into."""
    parents = iter(parents)
    merged = next(parents, {})
    for other in parents:
        for node, up in other.items():
            union(merged, node, up)
    return merged


def components(keys: Iterable[Hashable], pairs: Iterable[tuple]) -> dict:
    """Each key's cluster, named by its smallest member (:func:`union` over
    the pairs: the reference the Beam steps are checked against).

    >>> components("abcde", [("b", "c"), ("c", "e")])
    {'a': 'a', 'b': 'b', 'c': 'b', 'd': 'd', 'e': 'b'}
    """
    parent = {key: key for key in keys}
    for a, b in pairs:
        union(parent, a, b)
    return {key: find(parent, key) for key in parent}
