"""lm-evaluation-harness's side of the parity suite: its stock task configs pointed at local files,
run by its own evaluator on its own ``HFLM``, with heads ablated in the Hugging Face model it loaded.

Imported by the tests of this folder only (never by cel_lens).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch

from cel_lens.heads import HeadSet
from cel_lens.tasks.arithmetic import CONFIGS as ARITHMETIC_CONFIGS
from cel_lens.tasks.mbpp import SPLIT_TASK_IDS

# stock configs, relative to lm_eval/tasks
STOCK_CONFIGS: dict[str, str] = {
    "boolq": "super_glue/boolq/default.yaml",
    "hellaswag": "hellaswag/hellaswag.yaml",
    "mbpp": "mbpp/mbpp.yaml",
    **{f"arithmetic_{c}": f"arithmetic/arithmetic_{c}.yaml" for c in ARITHMETIC_CONFIGS},
}


def superglue_boolq_rows(dev_jsonl: Path) -> list[dict[str, Any]]:
    """The official BoolQ validation rows in SuperGLUE's schema (what lm-eval's ``boolq`` reads from
    ``aps/super_glue``): passage ``"{title} -- {passage}"``, ``idx``, ``label`` 0/1."""
    rows = [json.loads(line) for line in dev_jsonl.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [
        {"question": r["question"], "passage": f"{r['title']} -- {r['passage']}", "idx": i, "label": int(r["answer"])}
        for i, r in enumerate(rows)
    ]


def mbpp_test_rows(mbpp_jsonl: Path) -> list[dict[str, Any]]:
    """MBPP's ``test`` split of the ``full`` config (task_id 11-510, in order), as the hub gives it."""
    lo, hi = SPLIT_TASK_IDS["test"]
    rows = [json.loads(line) for line in mbpp_jsonl.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted((r for r in rows if lo <= int(r["task_id"]) <= hi), key=lambda r: int(r["task_id"]))


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """``rows`` as JSON Lines at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def stock_task(
    name: str, data_files: Mapping[str, str], cache_dir: Path, generation: Mapping[str, Any] = (), **overrides: Any
):
    """lm-eval's stock config of ``name`` with its dataset read from local JSON Lines files
    (``generation`` updates its ``generation_kwargs``, other ``overrides`` its top-level keys)."""
    import lm_eval.tasks
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(Path(lm_eval.tasks.__file__).parent / STOCK_CONFIGS[name], resolve_func=True)
    cfg.pop("tag", None)
    cfg.update(
        dataset_path="json",
        dataset_name=None,
        dataset_kwargs={"data_files": dict(data_files), "cache_dir": str(cache_dir)},
        **overrides,
    )
    if generation:
        cfg["generation_kwargs"] = {**cfg.get("generation_kwargs", {}), **dict(generation)}
    return ConfigurableTask(config=cfg)


@contextlib.contextmanager
def zeroed_heads(hf_model: torch.nn.Module, heads: HeadSet) -> Iterator[None]:
    """Zero each head's input columns of ``o_proj`` in a Hugging Face Llama-family model, restored
    on exit: the head's whole contribution removed, as cel_lens's ``hook_z`` ablation."""
    d_head = int(getattr(hf_model.config, "head_dim", None) or hf_model.config.hidden_size // hf_model.config.num_attention_heads)
    saved = []
    with torch.no_grad():
        for h in heads:
            weight = hf_model.model.layers[h.layer].self_attn.o_proj.weight
            cols = slice(h.head * d_head, (h.head + 1) * d_head)
            saved.append((weight, cols, weight[:, cols].clone()))
            weight[:, cols] = 0
    try:
        yield
    finally:
        with torch.no_grad():
            for weight, cols, value in saved:
                weight[:, cols] = value


def run(lm, tasks: Mapping[str, Any], doc_ids: Mapping[str, list[int]], heads: HeadSet) -> dict[str, dict[int, dict]]:
    """lm-eval's evaluator on ``tasks`` (name -> task) for the given documents, with ``heads``
    ablated: ``{task name: {doc_id: logged sample}}``."""
    from lm_eval.evaluator import evaluate

    with zeroed_heads(lm.model, heads):
        out = evaluate(
            lm,
            {"tasks": dict(tasks), "groups": {}, "group_map": {}},
            samples={k: list(v) for k, v in doc_ids.items()},
            log_samples=True,
            bootstrap_iters=0,
            verbosity="ERROR",
            confirm_run_unsafe_code=True,
        )
    return {name: {int(s["doc_id"]): s for s in out["samples"][name]} for name in tasks}


class CodeEval:
    """Offline stand-in for Hugging Face ``evaluate``'s ``code_eval`` metric, which lm-eval's MBPP
    metric loads from the hub: each program is ``prediction + "\\n" + reference`` (the problem's
    asserts), run in a fresh interpreter with code_eval's 3 s timeout; it passes iff it exits
    cleanly. (code_eval runs it in a child process under a reliability guard; the verdicts of
    programs that neither touch the system nor exceed the timeout are the same.)"""

    timeout = 3.0

    def passed(self, program: str) -> bool:
        """Whether ``program`` runs to the end without an exception, within the timeout."""
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", program], capture_output=True, timeout=self.timeout,
                env={"PATH": os.environ.get("PATH", "")},
            )
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0

    def compute(self, references: Sequence[str], predictions: Sequence[Sequence[str]], k: Sequence[int] = (1,), **_: Any):
        """code_eval's ``(pass_at_k, results)`` for ``k = [1]``."""
        verdicts = [
            [self.passed(candidate + "\n" + test) for candidate in candidates]
            for candidates, test in zip(predictions, references)
        ]
        rate = sum(sum(v) / len(v) for v in verdicts) / max(1, len(verdicts))
        return {"pass@1": rate}, {i: v for i, v in enumerate(verdicts)}


@contextlib.contextmanager
def offline_code_eval() -> Iterator[None]:
    """``evaluate.load("code_eval")`` answered by :class:`CodeEval` (and ``HF_ALLOW_CODE_EVAL=1``)."""
    import evaluate

    original = evaluate.load
    old_env = os.environ.get("HF_ALLOW_CODE_EVAL")

    def load(path: str, *args: Any, **kwargs: Any):
        return CodeEval() if path == "code_eval" else original(path, *args, **kwargs)

    evaluate.load = load
    os.environ["HF_ALLOW_CODE_EVAL"] = "1"
    try:
        yield
    finally:
        evaluate.load = original
        if old_env is None:
            os.environ.pop("HF_ALLOW_CODE_EVAL", None)
        else:
            os.environ["HF_ALLOW_CODE_EVAL"] = old_env
