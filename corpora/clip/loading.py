"""Loading an open_clip model: architecture, weights (a pretrained tag or a
local checkpoint), device; every failure is one :class:`ClipModelError` line.

torch and open_clip are imported only when a model is loaded, so the rest of
the core works without the ``clip`` extra.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
import threading
from typing import Any, Sequence

import numpy as np

from corpora.clip.settings import ClipModelError, ClipSettings, is_checkpoint_path, one_line
from corpora.config.extras import missing_extra


def require_clip() -> None:
    """Fail early and clearly when the ``clip`` extra is not installed."""
    try:
        import open_clip  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise ClipModelError(str(missing_extra("clip", "CLIP scoring", exc))) from None


def resolve_device(requested: str) -> str:
    """``auto`` → ``cuda`` where torch sees a GPU, else ``cpu``.

    Checked here rather than trusted to a framework: Beam's RunInference
    ``device='GPU'`` falls back to the CPU without saying so.
    """
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ClipModelError("--clip-device cuda was asked for, but torch sees no CUDA GPU")
    return requested


_REGISTER_LOCK = threading.Lock()


def _register_config(name: str, config_text: str) -> None:
    """Make ``name`` an open_clip architecture (open_clip reads configs from files)."""
    import open_clip

    with _REGISTER_LOCK:
        existing = open_clip.get_model_config(name)
        if existing is not None and json.dumps(existing, sort_keys=True) == config_text:
            return
        directory = tempfile.mkdtemp(prefix="corpora-clip-config-")
        path = os.path.join(directory, f"{name}.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(config_text)
        open_clip.add_model_config(path)


def _check_architecture(name: str) -> None:
    import open_clip

    known = open_clip.list_models()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else f"{len(known)} known, e.g. ViT-B-32, ViT-L-14"
        )
        raise ClipModelError(
            f"unknown CLIP architecture {name!r} ({hint}; or pass an open_clip config .json)"
        )


def _load_checkpoint(model, name: str, path: str) -> None:
    """Load a local checkpoint strictly; explain a mismatch in one line."""
    import open_clip
    import torch

    if not os.path.isfile(path):
        raise ClipModelError(f"CLIP checkpoint not found: {path}")
    try:
        state = open_clip.factory.load_state_dict(path)
    except Exception as exc:  # torch.load raises many types for a file that is not a checkpoint
        raise ClipModelError(
            f"CLIP checkpoint is not readable: {path} (not a PyTorch or safetensors "
            f"state dict: {_load_reason(exc)})"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ClipModelError(
            f"CLIP checkpoint is not readable: {path} (not a state dict of tensors)"
        )
    try:
        open_clip.load_checkpoint(model, path, strict=True)
    except Exception:
        raise ClipModelError(
            f"CLIP checkpoint {path} does not fit architecture {name}: "
            f"{_mismatch(model.state_dict(), state)}"
        ) from None


def _load_reason(exc: BaseException) -> str:
    """The useful part of a torch.load failure (weights-only loading buries it)."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        rest = [line.strip() for line in text.split(marker, 1)[1].splitlines() if line.strip()]
        if rest:
            return rest[0]
    return one_line(exc)


def _mismatch(expected: dict, found: dict) -> str:
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = sorted(
        k for k in set(expected) & set(found) if tuple(expected[k].shape) != tuple(found[k].shape)
    )
    parts = []
    if wrong:
        k = wrong[0]
        parts.append(
            f"{len(wrong)} tensor(s) with another shape (first {k}: "
            f"checkpoint {list(found[k].shape)}, architecture {list(expected[k].shape)})"
        )
    if missing:
        parts.append(f"{len(missing)} missing (first {missing[0]})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected (first {unexpected[0]})")
    return "; ".join(parts) or "the weights were rejected"


class ClipModel:
    """A loaded open_clip model with its preprocessing and tokenizer.

    Safe to share across threads: forward passes run under
    ``torch.inference_mode`` and hold no state between calls.
    """

    def __init__(self, settings: ClipSettings, model, preprocess, tokenizer, device: str):
        self.settings = settings
        self.model = model
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.device = device
        self.batch_size = settings.batch_size
        import open_clip

        self.embed_dim = (
            int((open_clip.get_model_config(settings.model) or {}).get("embed_dim", 0)) or None
        )
        self.precision = "fp16-autocast" if device == "cuda" else "fp32"

    def _run(self, encode, batch):
        import torch

        with torch.inference_mode():
            if self.device == "cuda":
                with torch.autocast("cuda", dtype=torch.float16):
                    features = encode(batch.to(self.device, non_blocking=True))
            else:
                features = encode(batch)
            features = torch.nn.functional.normalize(features.float(), dim=-1)
        return features.cpu().numpy()

    def image_tensor(self, image) -> Any:
        """One decoded PIL image → the model's input tensor [3, H, W]."""
        return self.preprocess(image)

    def encode_images(self, images: Sequence[Any]) -> np.ndarray:
        """Decoded PIL images (or preprocessed tensors) → unit-norm float32 [n, embed_dim]."""
        import torch

        tensors = [img if isinstance(img, torch.Tensor) else self.preprocess(img) for img in images]
        return self._batched(tensors, lambda chunk: torch.stack(chunk), self.model.encode_image)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Texts → unit-norm float32 [n, embed_dim] (truncated to the context length)."""
        return self._batched(list(texts), self.tokenizer, self.model.encode_text)

    def _batched(self, items: list, collate, encode) -> np.ndarray:
        outputs = []
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            padding = self.batch_size - len(chunk)
            # A fixed batch shape keeps each row's numerics independent of its neighbours.
            batch = collate(chunk + [chunk[-1]] * padding)
            outputs.append(self._run(encode, batch)[: len(chunk)])
        if not outputs:
            return np.zeros((0, self.embed_dim or 0), dtype=np.float32)
        return np.concatenate(outputs).astype(np.float32, copy=False)


def needs_quick_gelu(architecture: str, tag: str | None) -> bool:
    """Whether weights ``tag`` were trained with QuickGELU that ``architecture``'s config lacks.

    OpenAI's weights use QuickGELU; open_clip's ``ViT-L-14`` config does not,
    and open_clip only warns when the two are combined. Without this, ``ViT-L-14``
    with ``openai`` would score with the wrong activation.
    """
    import open_clip

    if tag is None:
        return False
    tag_config = open_clip.get_pretrained_cfg(architecture, tag) or {}
    model_config = open_clip.get_model_config(architecture) or {}
    return bool(tag_config.get("quick_gelu")) and not model_config.get("quick_gelu", False)


def load_clip(settings: ClipSettings, device: str | None = None) -> ClipModel:
    """Load the model ``settings`` name; raises :class:`ClipModelError` in one line."""
    require_clip()
    import open_clip

    device = resolve_device(device or settings.device)
    if settings.model_config is not None:
        _register_config(settings.model, settings.model_config)
    _check_architecture(settings.model)
    pretrained = settings.pretrained
    tag = None
    if pretrained is not None and not is_checkpoint_path(pretrained):
        tags = open_clip.list_pretrained_tags_by_model(settings.model)
        if pretrained not in tags:
            known = ", ".join(tags) if tags else "none; pass a local checkpoint file"
            raise ClipModelError(
                f"unknown pretrained tag {pretrained!r} for CLIP architecture "
                f"{settings.model} (known tags: {known})"
            )
        tag = pretrained
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            settings.model, pretrained=tag, force_quick_gelu=needs_quick_gelu(settings.model, tag)
        )
    except ClipModelError:
        raise
    except Exception as exc:
        if tag is not None:
            raise ClipModelError(
                f"cannot get CLIP weights {settings.model}/{tag}: {one_line(exc)} "
                "(downloading needs network; or pass a local checkpoint file)"
            ) from None
        raise ClipModelError(
            f"cannot build CLIP architecture {settings.model}: {one_line(exc)}"
        ) from None
    if pretrained is not None and tag is None:
        _load_checkpoint(model, settings.model, pretrained)
    model = model.to(device).eval()
    tokenizer = open_clip.get_tokenizer(settings.model)
    return ClipModel(settings, model, preprocess, tokenizer, device)
