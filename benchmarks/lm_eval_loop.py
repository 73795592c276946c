"""The lm-evaluation-harness loop: one harness call per head, as ablation studies evaluate today.

The benchmark's examples are written to a local JSON Lines file with a task config next to it
(``dataset_path: json`` over that file: no hub), so lm-eval reads the very prompts and answers
cel_lens scores. The model is ``transformers``' own (``HFLM``, batch 8, lm-eval's length sorting);
a head is ablated by a forward pre-hook zeroing its input columns of ``o_proj`` (the same
intervention as cel_lens's ``hook_z``). Each head is one ``simple_evaluate`` call, with the
per-sample records kept, so per-example decisions can be compared with cel_lens's.

Protocols: exact match as lm-eval's ``loglikelihood`` requests with ``acc`` (= every target token
greedy, as lm-eval's arithmetic tasks score), multiple choice as ``multiple_choice`` with ``acc``
or ``acc_norm``. Needs the ``bench`` extra (``pip install "cel_lens[bench]"``).
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from benchmarks.floor import zero_head_prehook

__all__ = ["write_task", "LmEvalLoop"]


def write_task(split, name: str, root: Path) -> Path:
    """A local lm-eval task (``{root}/{name}.yaml`` and its data) holding ``split``'s examples."""
    root.mkdir(parents=True, exist_ok=True)
    data = root / f"{name}.jsonl"
    mc = split.answer_type == "multiple_choice"
    rows = []
    for ex in split:
        if mc:
            spaced = all(c.startswith(" ") for c in ex.choices)
            rows.append({"prompt": ex.prompt, "choices": [c[1:] if spaced else c for c in ex.choices], "label": ex.label})
        else:
            rows.append({"prompt": ex.prompt, "target": ex.target})
    delim = " " if mc and all(c.startswith(" ") for ex in split for c in ex.choices) else ""
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    metric = split.metric if mc else "acc"
    lines = [
        f"task: {name}",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {json.dumps(str(data))}",
        "test_split: test",
        f"output_type: {'multiple_choice' if mc else 'loglikelihood'}",
        'doc_to_text: "{{prompt}}"',
        *(['doc_to_choice: "{{choices}}"', 'doc_to_target: "{{label}}"'] if mc else ['doc_to_target: "{{target}}"']),
        f"target_delimiter: {json.dumps(delim)}",
        "metric_list:",
        f"  - metric: {metric}",
    ]
    path = root / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class LmEvalLoop:
    """lm-eval over one split of a ``transformers`` model, one harness call per head."""

    def __init__(self, hf, tokenizer, split, name: str, batch_size: int = 8, root: Optional[Path] = None) -> None:
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager

        for logger in ("lm-eval", "lm_eval", "datasets"):
            logging.getLogger(logger).setLevel(logging.ERROR)
        self.hf = hf
        self.split = split
        self.name = name
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="cel_lens_lmeval_"))
        write_task(split, name, self.root)
        self.lm = HFLM(pretrained=hf, tokenizer=tokenizer, batch_size=batch_size, device="cpu", dtype=hf.dtype)
        self.tasks = TaskManager(include_path=str(self.root))
        self.metric = split.metric if split.answer_type == "multiple_choice" else "acc"

    def evaluate(self, head: Optional[tuple[int, int]] = None) -> torch.Tensor:
        """Per-example correctness (split order) with ``head`` (layer, head) zero-ablated, from one
        ``simple_evaluate`` call."""
        import lm_eval

        handle = None if head is None else zero_head_prehook(self.hf, *head)
        try:
            out = lm_eval.simple_evaluate(
                model=self.lm, tasks=[self.name], task_manager=self.tasks, num_fewshot=0, log_samples=True,
                bootstrap_iters=0, verbosity="ERROR",
            )
        finally:
            if handle is not None:
                handle.remove()
        samples = out["samples"][self.name]
        correct = torch.zeros(len(self.split), dtype=torch.bool)
        for s in samples:
            correct[int(s["doc_id"])] = bool(s[self.metric])
        return correct

    def scan(self, heads: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """Intact and per-head correctness, and the gains (as :func:`cel_lens.scoring.exact_scores`)."""
        intact = self.evaluate(None)
        rows = [self.evaluate(h) for h in heads]
        correct = torch.stack(rows) if rows else torch.zeros(0, len(self.split), dtype=torch.bool)
        gains = correct.to(torch.float64).mean(1) - intact.to(torch.float64).mean()
        return {"heads": list(heads), "intact": intact, "correct": correct, "gains": gains}
