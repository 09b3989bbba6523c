"""The terminal view of ``stats.json`` (``corpora stats``), and the number
formats the HTML report shares with it."""

from __future__ import annotations

from typing import Any, Mapping


def format_number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def format_count(count: int, noun: str) -> str:
    """A count and its noun, singular for one: what the summaries print.

    >>> format_count(1, "sequence"), format_count(12800, "URL"), format_count(0, "image")
    ('1 sequence', '12,800 URLs', '0 images')
    """
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def format_share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def format_table(stats: Mapping[str, Any]) -> str:
    """A compact plain-text view of ``stats`` (``corpora stats``)."""
    totals, packing = stats["totals"], stats["packing"]
    reference = (stats.get("reference") or {}).get("values", {})
    rows: list[tuple[str, str, str]] = [
        ("documents", format_number(totals["documents"]), ""),
        ("images", format_number(totals["images"]), ""),
        ("text tokens", format_number(totals["text_tokens"]), ""),
        ("image-slot tokens", format_number(totals["image_tokens"]), ""),
        ("BOS/EOS tokens", format_number(totals["special_tokens"]), ""),
        ("padding tokens", format_number(totals["padding_tokens"]), ""),
        (
            "text tokens per image",
            format_number(stats["text_tokens_per_image"]),
            format_number(reference["text_tokens_per_image"])
            if "text_tokens_per_image" in reference
            else "",
        ),
    ]

    def dist_row(
        label: str, dist: Mapping[str, Any] | None, ref: Any = None, digits: int = 1
    ) -> None:
        if dist is None:
            rows.append((label, "–", format_number(ref) if ref is not None else ""))
            return
        rows.append(
            (
                label,
                f"mean {format_number(dist['mean'], digits)}  "
                f"median {format_number(dist['median'], digits)}  "
                f"p5 {format_number(dist['p5'], digits)}  p95 {format_number(dist['p95'], digits)}",
                format_number(ref) if ref is not None else "",
            )
        )

    dist_row(
        "images per document", stats["images_per_document"], reference.get("images_per_document")
    )
    dist_row("text tokens per document", stats["text_tokens_per_document"])
    rows.append(("sequences", format_number(packing["sequences"]), ""))
    dist_row("documents per sequence", packing["documents_per_sequence"])
    rows.append(("non-padding fraction", format_share(packing["non_padding_fraction"]), ""))
    rows.append(
        (
            "documents split",
            f"{format_number(packing['split_documents'])} "
            f"({format_share(packing['split_fraction'])})",
            "",
        )
    )
    if packing.get("images_with_text_fraction") is not None:
        rows.append(
            (
                "images with their text",
                f"{format_share(packing['images_with_text_fraction'])} "
                f"({format_number(packing['pieces_ending_in_image'])} pieces end in an image slot)",
                "",
            )
        )
    for name, dist in stats["scores"].items():
        dist_row(f"score {name}", dist, digits=3)
    fetch = stats.get("image_fetch")
    if fetch:
        rows.append(
            (
                "image fetch success",
                f"{format_share(fetch['success_rate'])} of {format_number(fetch['attempted'])}",
                "",
            )
        )
        for failure in fetch["failures"]:
            rows.append(
                (
                    f"  failed {failure['reason']}",
                    f"{format_number(failure['count'])} ({format_share(failure['share'])})",
                    "",
                )
            )
    funnel = stats.get("funnel")
    if funnel:
        rows.append((f"funnel input ({funnel['unit']}s)", format_number(funnel["input"]), ""))
        for drop in funnel["dropped"]:
            rows.append(
                (
                    f"  dropped {drop['reason']}",
                    f"{format_number(drop['count'])} ({format_share(drop['share'])})",
                    "",
                )
            )
        rows.append(
            (
                "  kept",
                f"{format_number(funnel['kept'])} ({format_share(funnel['kept_share'])})",
                "",
            )
        )
        for removed in funnel.get("images_removed", ()):  # from kept records
            rows.append(
                (f"  images removed {removed['reason']}", format_number(removed["count"]), "")
            )
    width = max(len(r[0]) for r in rows)
    value_width = max(len(r[1]) for r in rows)
    scope = (
        ""
        if stats.get("scope", "build") == "build"
        else " (some shards only: no funnel, no fetch outcomes)"
    )
    lines = [
        f"{stats['corpus']}: seq_len {stats['seq_len']}, "
        f"{stats['tokens_per_image']} tokens per image{scope}"
    ]
    if reference:
        lines.append(f"{'':<{width}}  {'':<{value_width}}  VILA")
    for label, value, ref in rows:
        lines.append(f"{label:<{width}}  {value:<{value_width}}  {ref}".rstrip())
    if reference:
        lines.append(f"VILA: {stats['reference']['source']}")
    return "\n".join(lines)
