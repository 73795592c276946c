"""Writing an ablated model as an ordinary checkpoint: each removed head's output-projection input
columns set to zero, every other byte as it was.

Zeroing head ``h`` of layer ``l`` at ``hook_z`` is exactly zeroing columns ``[h*d_head, (h+1)*d_head)``
of layer ``l``'s ``o_proj.weight`` (``[d_model, n_heads*d_head]``; the columns belong to *query*
heads, grouped-query attention or not). An ``o_proj`` bias belongs to no head and stays. A
TransformerLens-native checkpoint (:mod:`cel_lens.model.native`) holds ``blocks.{l}.attn.W_O``
``[n_heads, d_head, d_model]``, where head ``h`` is the slice ``W_O[h]``.

Shards are streamed, never loaded: bytes are copied as read (1 MiB at a time) except the edited
tensors, each read whole, zeroed in place and written back. Headers, tensor order and untouched
tensors are byte-identical to the source, and peak memory is one chunk plus the largest edited
tensor (a 70B model's ``o_proj``: 128 MiB in bfloat16) whatever the checkpoint's size. Every other
file (config, generation config, tokenizer files, chat template, shard index) is copied byte for
byte; the index needs no change, since no tensor changes name, shape, dtype or shard.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional, Sequence, Union

from cel_lens.heads import HeadSet, HeadsLike
from cel_lens.model.ablation import Ablation
from cel_lens.model.card import model_card
from cel_lens.model.export_fold import fold_bias
from cel_lens.model.native import NATIVE_KEY, is_native_checkpoint
from cel_lens.model.safetensors_io import file_sha256, read_header, stream_file
from cel_lens.version import __version__

__all__ = [
    "EXPORT_FORMAT", "PROVENANCE_FILE", "PROVENANCE_HASH_FILE", "CARD_FILE", "Checkpoint", "TensorEdit",
    "read_checkpoint", "plan_edits", "check_out_dir", "export_checkpoint",
]

EXPORT_FORMAT = "cel_lens-export/1"
"""The ``format`` entry of :data:`PROVENANCE_FILE`."""
PROVENANCE_FILE = "cel_lens_export.json"
"""Machine-readable provenance written next to the weights."""
PROVENANCE_HASH_FILE = "cel_lens_export.json.sha256"
"""The sha256 of :data:`PROVENANCE_FILE` (``sha256sum -c`` format): the provenance lists every other
file's hash, this one covers the provenance itself, so relabelled heads do not pass verification."""
CARD_FILE = "README.md"
"""The model card (YAML front matter, as the Hugging Face hub reads it)."""
"""Bytes copied per read while streaming a file."""

_FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
# an all-zero bit pattern is +0.0 in each of these formats
_OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf", ".npz")
_HF_TARGET = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.o_proj\.weight$")
_NATIVE_TARGET = re.compile(r"^blocks\.(\d+)\.attn\.W_O$")


@dataclass(frozen=True)
class Checkpoint:
    """A safetensors checkpoint directory as export sees it: its kind (``"hf"`` or TransformerLens
    ``"native"``), weight shards (names relative to ``path``), shard index and attention shape."""

    path: Path
    kind: Literal["hf", "native"]
    shards: tuple[str, ...]
    index: Optional[str]
    n_layers: int
    n_heads: int
    d_head: int
    extra: tuple[str, ...] = ()  # safetensors files outside the shard index: neither edited nor copied


@dataclass(frozen=True)
class TensorEdit:
    """One tensor to edit: ``rows`` rows of ``row_bytes`` bytes from absolute file offset
    ``start``, with byte ranges ``spans`` of every row set to zero (``heads`` names them)."""

    name: str
    start: int
    rows: int
    row_bytes: int
    spans: tuple[tuple[int, int], ...]
    heads: tuple[str, ...]
    data: Optional[bytes] = None  # the tensor's new bytes (a folded bias), written before the spans

    @property
    def nbytes(self) -> int:
        """Size of the tensor in bytes."""
        return self.rows * self.row_bytes


def _config(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text(encoding="utf-8"))


def read_checkpoint(path: Union[str, Path]) -> Checkpoint:
    """Describe a checkpoint directory with safetensors weights (one file, or shards with an index);
    one-line errors for anything export cannot edit."""
    root = Path(path)
    if not (root / "config.json").is_file():
        raise ValueError(f"{root} is not a checkpoint directory (no config.json)")
    if is_native_checkpoint(root):
        cfg = _config(root)[NATIVE_KEY]
        n_heads = int(cfg["n_heads"])
        d_head = int(cfg.get("d_head") or int(cfg["d_model"]) // n_heads)
        return Checkpoint(root, "native", ("model.safetensors",), None, int(cfg["n_layers"]), n_heads, d_head)
    shards = tuple(sorted(p.name for p in root.glob("*.safetensors")))
    if not shards:
        others = sorted(p.name for p in root.iterdir() if p.name.endswith(_OTHER_WEIGHTS))
        what = f"only {', '.join(others[:3])}" if others else "no weights"
        raise ValueError(f"{root} has {what}: export edits safetensors checkpoints (save the model with safe_serialization)")
    indexes = sorted(p.name for p in root.glob("*.safetensors.index.json"))
    if len(indexes) > 1:
        raise ValueError(f"{root} has several shard indexes ({', '.join(indexes)})")
    extra: tuple[str, ...] = ()
    if indexes:  # the index names the shards; another safetensors file beside them is not the model's
        indexed = set(json.loads((root / indexes[0]).read_text(encoding="utf-8")).get("weight_map", {}).values())
        shards, extra = tuple(s for s in shards if s in indexed), tuple(s for s in shards if s not in indexed)
    cfg = _config(root)
    text = cfg.get("text_config") if "num_attention_heads" not in cfg and isinstance(cfg.get("text_config"), dict) else cfg
    try:
        n_heads = int(text["num_attention_heads"])
        d_head = int(text.get("head_dim") or int(text["hidden_size"]) // n_heads)
        n_layers = int(text["num_hidden_layers"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{root}/config.json lacks the attention shape ({err}): not a decoder export supports") from err
    return Checkpoint(root, "hf", shards, indexes[0] if indexes else None, n_layers, n_heads, d_head, extra)


def _check_index(ckpt: Checkpoint, names: dict[str, str]) -> None:
    """The shard index, if any, must map every tensor to the shard that holds it."""
    if ckpt.index is None:
        if len(ckpt.shards) > 1:
            raise ValueError(f"{ckpt.path} has {len(ckpt.shards)} safetensors files but no shard index")
        return
    weight_map = json.loads((ckpt.path / ckpt.index).read_text(encoding="utf-8")).get("weight_map", {})
    if weight_map != names:
        wrong = sorted(set(weight_map.items()) ^ set(names.items()))[:1]
        raise ValueError(f"{ckpt.path / ckpt.index} does not match the shards' headers (e.g. {wrong})")


def plan_edits(ckpt: Checkpoint, heads: HeadsLike) -> dict[str, list[TensorEdit]]:
    """Shard name -> the tensors to edit in it (with their byte ranges) for removing ``heads``."""
    head_set = HeadSet.parse(heads).validate(ckpt.n_layers, ckpt.n_heads, str(ckpt.path))
    if not head_set:
        raise ValueError("no heads to remove: export needs at least one head (e.g. L3H1)")
    pattern = _NATIVE_TARGET if ckpt.kind == "native" else _HF_TARGET
    found: dict[int, tuple[str, str, int, dict[str, Any]]] = {}
    names: dict[str, str] = {}
    for shard in ckpt.shards:
        data_start, header = read_header(ckpt.path / shard)
        for name, info in header.items():
            if name == "__metadata__":
                continue
            names[name] = shard
            match = pattern.search(name)
            if match is None:
                continue
            layer = int(match.group(1))
            if layer in found:
                raise ValueError(f"two output projections for layer {layer}: {found[layer][1]} and {name}")
            found[layer] = (shard, name, data_start, info)
    if ckpt.kind == "hf":
        _check_index(ckpt, names)
    plan: dict[str, list[TensorEdit]] = {}
    for layer in head_set.layers:
        if layer not in found:
            what = "blocks.{l}.attn.W_O" if ckpt.kind == "native" else "model.layers.{l}.self_attn.o_proj.weight"
            raise ValueError(
                f"{ckpt.path} has no {what.format(l=layer)}: export supports Llama-style attention (Llama, Qwen2, SmolLM3, ...)"
            )
        shard, name, data_start, info = found[layer]
        in_layer = tuple(h.head for h in head_set if h.layer == layer)
        plan.setdefault(shard, []).append(_tensor_edit(ckpt, layer, in_layer, name, data_start, info))
    return plan


def _tensor_edit(ckpt: Checkpoint, layer: int, heads: Sequence[int], name: str, data_start: int, info: Mapping) -> TensorEdit:
    dtype, shape = info["dtype"], [int(s) for s in info["shape"]]
    begin, end = (int(x) for x in info["data_offsets"])
    if dtype not in _FLOAT_BYTES:
        raise ValueError(f"{name} is stored as {dtype}: export edits float weights only (not quantized checkpoints)")
    item = _FLOAT_BYTES[dtype]
    if ckpt.kind == "native":  # [n_heads, d_head, d_model]: head h is one contiguous block
        if len(shape) != 3 or shape[:2] != [ckpt.n_heads, ckpt.d_head]:
            raise ValueError(f"{name} has shape {shape}, expected [{ckpt.n_heads}, {ckpt.d_head}, d_model]")
        rows, width = 1, shape[0] * shape[1] * shape[2] * item
        block = shape[1] * shape[2] * item
    else:  # [d_model, n_heads * d_head]: head h is columns h*d_head ... (h+1)*d_head of every row
        if len(shape) != 2 or shape[1] != ckpt.n_heads * ckpt.d_head:
            raise ValueError(f"{name} has shape {shape}, expected [d_model, {ckpt.n_heads} x {ckpt.d_head}]")
        rows, width = shape[0], shape[1] * item
        block = ckpt.d_head * item
    if end - begin != rows * width:
        raise ValueError(f"{name}: {end - begin} bytes stored for shape {shape} of {dtype}")
    spans = tuple((h * block, (h + 1) * block) for h in sorted(heads))
    return TensorEdit(name, data_start + begin, rows, width, spans, tuple(f"L{layer}H{h}" for h in sorted(heads)))


def _other_files(ckpt: Checkpoint) -> tuple[list[str], list[str]]:
    """``(files to copy as they are, entries left out)``, relative to the checkpoint: every file but
    the weights (edited apart) and other weight formats (they would hold the unedited model); a
    Hugging Face checkpoint's subdirectories are left out, a native one's (its tokenizer) kept."""
    copy, left = [], []
    entries = ckpt.path.rglob("*") if ckpt.kind == "native" else ckpt.path.iterdir()
    for p in sorted(entries):
        rel = p.relative_to(ckpt.path).as_posix()
        if p.is_dir():
            if ckpt.kind == "hf":
                left.append(rel + "/")
            continue
        if rel in ckpt.shards or rel in (CARD_FILE, PROVENANCE_FILE, PROVENANCE_HASH_FILE):
            continue
        (left if p.name.endswith(_OTHER_WEIGHTS) or rel in ckpt.extra else copy).append(rel)
    return copy, left


def check_out_dir(out: Union[str, Path], source: Optional[Union[str, Path]] = None) -> None:
    """Refuse an output directory that exists and is not empty, or lies inside the source."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"output directory {out} exists and is not empty: choose a new or empty directory")
    if source is None:
        return
    src, dst = Path(source).resolve(), out.resolve()
    if dst == src or src in dst.parents:
        raise ValueError(f"output directory {out} is inside the source checkpoint {source}")


def export_checkpoint(
    source: Union[str, Path, Checkpoint],
    heads: HeadsLike,
    out_dir: Union[str, Path],
    *,
    provenance: Optional[Mapping[str, Any]] = None,
    card: Optional[Callable[[Mapping[str, Any]], str]] = None,
    ablation: Optional[Ablation] = None,
) -> Path:
    """Write ``source`` with ``heads`` removed (their output-projection input columns zeroed) to
    ``out_dir``, which must not exist or be empty; see the module docstring.

    Besides the checkpoint's files, ``out_dir`` gets :data:`PROVENANCE_FILE` (``provenance``
    entries, plus the heads, the edited tensors, the source files' and every written file's sha256)
    and :data:`CARD_FILE` (``card(provenance)``; default :func:`cel_lens.model.card.model_card`).
    Files are written to a sibling temporary directory that is renamed to ``out_dir`` when complete.
    An ``ablation`` whose kind writes its replacement into the output biases
    (:meth:`~cel_lens.model.ablation.Ablation.folds_into_bias`: mean, resample) is folded there (:mod:`~cel_lens.model.export_fold`), or refused in one line
    where that is not exact; zero needs only the zeroed columns.
    """
    ckpt = source if isinstance(source, Checkpoint) else read_checkpoint(source)
    out = Path(out_dir)
    check_out_dir(out, ckpt.path)
    plan = plan_edits(ckpt, heads)  # validates everything before a byte is written
    if ablation is not None and ablation.folds_into_bias():
        plan = _with_folded_bias(ckpt, heads, ablation, plan)
        provenance = {**(provenance or {}), "ablation": ablation.record()}
    copy, left_out = _other_files(ckpt)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    started = time.perf_counter()
    try:
        written, source_sha = {}, {}
        for rel in [*ckpt.shards, *copy]:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            source_sha[rel], written[rel] = stream_file(ckpt.path / rel, tmp / rel, plan.get(rel, ()))
        record = _provenance(ckpt, heads, plan, source_sha, left_out, provenance or {})
        (tmp / CARD_FILE).write_text((card or model_card)(record), encoding="utf-8")
        written[CARD_FILE] = file_sha256(tmp / CARD_FILE)
        record["files"] = dict(sorted(written.items()))
        record["export_seconds"] = round(time.perf_counter() - started, 3)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        (tmp / PROVENANCE_HASH_FILE).write_text(f"{file_sha256(tmp / PROVENANCE_FILE)}  {PROVENANCE_FILE}\n", encoding="utf-8")
        os.replace(tmp, out)  # an empty out_dir is replaced (POSIX rename)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _with_folded_bias(
    ckpt: Checkpoint, heads: HeadsLike, ablation: Ablation, plan: dict[str, list[TensorEdit]]
) -> dict[str, list[TensorEdit]]:
    """``plan`` plus one edit per ablated layer writing its folded output bias."""
    headers = {shard: read_header(ckpt.path / shard) for shard in ckpt.shards}
    names = {n: shard for shard, (_, h) in headers.items() for n in h if n != "__metadata__"}
    plan = {k: list(v) for k, v in plan.items()}
    for shard, tensors in fold_bias(ckpt, heads, ablation, names).items():
        data_start, header = headers[shard]
        for name, data in tensors.items():
            begin, end = (int(x) for x in header[name]["data_offsets"])
            if end - begin != len(data):
                raise ValueError(f"{name}: {end - begin} bytes stored, {len(data)} folded")
            layer = name.split("layers.")[-1].split(".")[0] if ckpt.kind == "hf" else name.split(".")[1]
            plan.setdefault(shard, []).append(
                TensorEdit(name, data_start + begin, 1, len(data), (), (f"bias of layer {layer}",), data)
            )
    return plan


def _slice_text(ckpt: Checkpoint, head: str) -> str:
    """The zeroed part of a head's tensor in index notation: ``[:, 16:32]`` (o_proj) or ``[1]`` (W_O)."""
    h = HeadSet.parse(head).heads[0].head
    return f"[{h}]" if ckpt.kind == "native" else f"[:, {h * ckpt.d_head}:{(h + 1) * ckpt.d_head}]"


def _provenance(
    ckpt: Checkpoint, heads: HeadsLike, plan: Mapping[str, list[TensorEdit]], source_sha: Mapping[str, str],
    left_out: list[str], extra: Mapping[str, Any],
) -> dict[str, Any]:
    shard_sha = {s: source_sha[s] for s in ckpt.shards}
    weights = hashlib.sha256("".join(f"{s}:{h}\n" for s, h in sorted(shard_sha.items())).encode()).hexdigest()
    source = {**dict(extra.get("source") or {}), "path": str(ckpt.path), "weights_sha256": "sha256-shards:" + weights,
              "shards_sha256": shard_sha}
    edits = [
        {"file": shard, "tensor": e.name, "heads": list(e.heads), "zeroed": [_slice_text(ckpt, h) for h in e.heads]}
        if e.data is None else {"file": shard, "tensor": e.name, "folded": "b + sum of W_O[h] c_h over the ablated heads"}
        for shard, es in sorted(plan.items()) for e in es
    ]
    return {
        "format": EXPORT_FORMAT,
        "cel_lens": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kind": ckpt.kind,
        "heads": str(HeadSet.parse(heads)),
        "d_head": ckpt.d_head,
        **{k: v for k, v in extra.items() if k != "source"},
        "source": source,
        "edited_tensors": edits,
        "not_copied": left_out,
        "not_in_shard_index": [
            f"{name}: a safetensors file the shard index {ckpt.index} does not name (e.g. consolidated weights): "
            "not edited, not copied" for name in ckpt.extra
        ],
    }
