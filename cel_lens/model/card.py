"""The model card of an exported checkpoint: ``README.md`` with the YAML front matter the Hugging
Face hub reads (``base_model``, ``tags``, ...) and a short account of what was removed and why."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Optional

__all__ = ["model_card", "front_matter", "edited_text"]

TAGS = ("cel-lens", "head-ablation", "capability-enhancement")
"""Tags every exported checkpoint carries."""


def _clean(value: Any) -> Any:
    """``value`` with non-finite floats as ``None`` (JSON, hence YAML, has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _is_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "/", "~"))


def front_matter(provenance: Mapping[str, Any]) -> dict[str, Any]:
    """The card's metadata: ``base_model`` (when the source is a hub id), ``library_name``, ``tags``
    and a ``cel_lens`` entry with the removed heads, the task, its protocol and the run's gain."""
    source = provenance.get("source") or {}
    run = provenance.get("run") or {}
    meta: dict[str, Any] = {}
    source_id = str(source.get("id") or "")
    if _is_hub_id(source_id):
        meta["base_model"] = source_id
    if provenance.get("kind") == "hf":
        meta["library_name"] = "transformers"
    meta["tags"] = list(TAGS)
    cel = {"removed_heads": provenance.get("heads"), "source": source_id or source.get("path")}
    for key in ("task", "metric", "protocol", "n_test", "test_acc_intact", "test_acc_ablated", "gain",
                "ci_low", "ci_high", "alpha", "p_value", "null_p"):
        if key in run:
            cel[key] = run[key]
    gguf = source.get("gguf") or {}
    if gguf:
        cel["gguf"] = {k: gguf.get(k) for k in ("file", "sha256", "quantization", "dequantized_to")}
    meta["cel_lens"] = cel
    return _clean(meta)


def _yaml(meta: Mapping[str, Any], indent: str = "") -> list[str]:
    """Block-style YAML of a mapping whose leaves are JSON scalars or lists (JSON is valid YAML)."""
    lines = []
    for key, value in meta.items():
        if isinstance(value, Mapping):
            lines += [f"{indent}{key}:", *_yaml(value, indent + "  ")]
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            lines += [f"{indent}{key}:", *(f"{indent}- {json.dumps(v)}" for v in value)]
        else:
            lines.append(f"{indent}{key}: {json.dumps(value)}")
    return lines


def _pp(x: Optional[float], signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{100 * float(x):+.2f} pp" if signed else f"{100 * float(x):.2f}%"


def _effect(run: Mapping[str, Any]) -> list[str]:
    if not run:
        return ["The heads were given directly, not selected by a recorded cel_lens run: no measured effect is attached."]
    ci = f"[{_pp(run.get('ci_low'))}, {_pp(run.get('ci_high'))}]"
    p = run.get("p_value")
    return [
        f"Selected by a cel_lens search on the discovery split of **{run.get('task')}**, then measured once on "
        f"its disjoint test split (n = {run.get('n_test')}, metric {run.get('metric')}):",
        "",
        "| | accuracy |",
        "|---|---|",
        f"| source model | {_pp(run.get('test_acc_intact'), False)} |",
        f"| this model | {_pp(run.get('test_acc_ablated'), False)} |",
        "",
        f"Gain Δ = {_pp(run.get('gain'))}, {1 - float(run.get('alpha', 0.05)):.0%} paired bootstrap CI {ci}, "
        f"exact McNemar p = {'n/a' if p is None else f'{float(p):.3g}'}. Protocol: {run.get('protocol') or 'n/a'}.",
    ]


def edited_text(provenance: Mapping[str, Any]) -> str:
    """The tensors an export zeroed, in index notation: ``blocks.0.attn.W_O[0]`` (native) or
    ``model.layers.3.self_attn.o_proj.weight[:, 16:32]``."""
    edits = provenance.get("edited_tensors") or []
    parts = [f"`{e['tensor']}{z}`" for e in edits for z in e.get("zeroed") or []]
    return ", ".join(parts) if parts else "`o_proj.weight[:, h*d_head:(h+1)*d_head]`"


def _gguf_note(gguf: Optional[Mapping[str, Any]]) -> list[str]:
    if not gguf:
        return []
    return [
        "",
        f"The source weights are the dequantization to {gguf.get('dequantized_to') or 'float32'} of the GGUF file "
        f"`{gguf.get('file')}` (quantized {gguf.get('quantization')}, sha256 `{gguf.get('sha256')}`), not the "
        "original full-precision checkpoint.",
    ]


def model_card(provenance: Mapping[str, Any]) -> str:
    """``README.md`` of an export described by ``provenance`` (see :mod:`cel_lens.model.checkpoint_edit`)."""
    meta = front_matter(provenance)
    source = meta["cel_lens"]["source"]
    heads = provenance.get("heads")
    if provenance.get("kind") == "native":
        load = ["```python", "import cel_lens as cl", "", 'model = cl.load_model("path/to/this/directory")', "```"]
    else:
        load = [
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            'model = AutoModelForCausalLM.from_pretrained("path/to/this/directory")',
            'tokenizer = AutoTokenizer.from_pretrained("path/to/this/directory")',
            "```",
        ]
    native = provenance.get("kind") == "native"
    body = [
        f"# {source} without attention heads {heads}",
        "",
        f"`{source}` with the attention heads {heads} (layer L, head H, 0-based) removed: each head's slice of its "
        f"layer's output projection ({edited_text(provenance)}) is zero, which is exactly "
        "zero-ablating the head's output. Every other weight, the config, generation config, tokenizer and chat "
        "template are byte for byte the source's. No hooks or custom code are needed to run it."
        + (" It is a TransformerLens-native checkpoint: it loads with `cl.load_model`, not with `transformers`."
           if native else ""),
        *_gguf_note(meta["cel_lens"].get("gguf")),
        "",
        "## Effect",
        "",
        *_effect(provenance.get("run") or {}),
        "",
        "## Use",
        "",
        *load,
        "",
        "`cel_lens_export.json` records the source, the edited tensors and the sha256 of every file "
        "(`cel_lens_export.json.sha256` that of the record itself); `cel-lens verify THIS_DIR [RUN_DIR]` re-checks "
        "the files, that exactly these slices are zero, and every test decision of the run against this checkpoint.",
        *([""] + [f"Left out: {line}" for line in provenance.get("not_in_shard_index") or []]),
    ]
    return "\n".join(["---", *_yaml(meta), "---", "", *body, ""])
