"""Taking the enhanced model home: a run's selected heads exported as a plain checkpoint, and the
check that the checkpoint makes, on its own, every test decision the run recorded.

* :func:`export_model` writes the source checkpoint with the heads' output-projection input
  columns zeroed (:mod:`cel_lens.model.checkpoint_edit`), a model card and ``cel_lens_export.json``;
* :func:`verify_export` loads the export with plain ``transformers`` (no cel_lens hooks, no
  TransformerLens; :mod:`cel_lens.evaluation.hf`), evaluates the run's D_test and compares every
  per-example decision with the ablated evaluation recorded in the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from cel_lens.config import canonical_dtype
from cel_lens.evaluation.evaluator import evaluate
from cel_lens.evaluation.hf import evaluate_plain, load_plain_model
from cel_lens.evaluation.seal import SealReader, record_test_read
from cel_lens.heads import Head, HeadSet
from cel_lens.model.ablation import Ablation, ablation_kind
from cel_lens.model.checkpoint_edit import PROVENANCE_FILE, PROVENANCE_HASH_FILE, check_out_dir, export_checkpoint
from cel_lens.model.safetensors_io import file_sha256
from cel_lens.model.checkpoint_source import encoding_defaults, export_source
from cel_lens.model.identity import weights_hash
from cel_lens.model.load import load_model
from cel_lens.runs.ablation_record import recorded_ablation
from cel_lens.runs.run_dir import MANIFEST
from cel_lens.runs.reader import RunRecord, as_record
from cel_lens.tasks.base import Task
from cel_lens.runs.manifest import default_run_dir, rebuild_task
from cel_lens.tasks.registry import loaded_splits

__all__ = ["export_model", "verify_export", "VerifyReport", "selected_heads", "run_task", "heads_zeroed", "run_ablation"]


def selected_heads(record: RunRecord) -> HeadSet:
    """S-hat of a run: its result's heads, or (unfinished) the ``selected`` event's."""
    if record.result is not None:
        return record.result.head_set
    if record.selection is not None:
        return HeadSet.parse(record.selection["heads"])
    raise ValueError(f"{record.path} has selected no heads yet (no result.json, no 'selected' event): nothing to export")


def _target(run_or_heads: Any) -> tuple[Optional[RunRecord], HeadSet]:
    """``(run or None, heads)`` of what :func:`export_model` was given."""
    if isinstance(run_or_heads, (HeadSet, Head, list, tuple)):
        return None, HeadSet.parse(run_or_heads)
    if isinstance(run_or_heads, str) and not Path(run_or_heads).exists():
        try:
            return None, HeadSet.parse(run_or_heads)
        except ValueError:
            raise FileNotFoundError(f"{run_or_heads!r} is neither a run directory nor a head set like L3H1+L12H7") from None
    record = as_record(run_or_heads)
    return record, selected_heads(record)


def _run_provenance(record: RunRecord) -> dict[str, Any]:
    """The provenance's ``run`` entry: where the heads come from and what they did on D_test."""
    manifest_file = record.path / MANIFEST
    raw = manifest_file.read_bytes() if manifest_file.is_file() else json.dumps(record.manifest, sort_keys=True).encode()
    task = record.manifest.get("task") or {}
    out: dict[str, Any] = {
        "path": str(record.path),
        "manifest_sha256": hashlib.sha256(raw).hexdigest(),
        "model_id": (record.manifest.get("model") or {}).get("id"),
        "model_weights_sha256": (record.manifest.get("model") or {}).get("weights_sha256"),
        "task": task.get("name"),
        "metric": task.get("metric"),
        "protocol": (task.get("options") or {}).get("protocol"),
        "finished": record.result is not None,
    }
    if record.result is not None:
        r = record.result
        t = r.test
        out.update(n_test=r.n_test, test_acc_intact=t.acc_intact, test_acc_ablated=t.acc_ablated, gain=t.gain,
                   ci_low=t.ci_low, ci_high=t.ci_high, alpha=r.alpha, p_value=t.p_value, null_p=r.null.p,
                   selected_before_test=t.selected_before_test)
    return out


def _check_model_source(source: Any, record: Optional[RunRecord]) -> None:
    """A loaded model given as the source of a run's export must be the run's model."""
    if record is None or isinstance(source, (str, os.PathLike)) or not hasattr(source, "named_parameters"):
        return
    want = (record.manifest.get("model") or {}).get("weights_sha256")
    if want and weights_hash(source) != want:
        raise ValueError(
            f"the model given as source is not the one {record.path} searched (its weights hash differs from the "
            "manifest's): load the run's model, in the run's dtype, or pass its checkpoint"
        )


def export_model(run_or_heads: Any, out_dir: Union[str, os.PathLike], *, source: Any = None) -> Path:
    """Write the enhanced model: the source checkpoint with S-hat's heads removed, to ``out_dir``
    (new or empty). Returns ``out_dir``.

    ``run_or_heads``: a run (``cel_lens.search``'s ``Run``, a :class:`RunRecord`, or a run
    directory) whose selected heads are removed, or heads (``"L3H1+L12H7"``, a ``HeadSet``).
    ``source``: where the weights come from, by default the run's model; a hub id (its cached
    snapshot), a checkpoint directory, ``"organism"``, or a model loaded with ``load_model`` (its
    source checkpoint; one built in memory is written as a TransformerLens-native checkpoint).
    """
    record, heads = _target(run_or_heads)
    check_out_dir(out_dir)
    if source is None:
        if record is None:
            raise ValueError("exporting heads without a run needs source= (a hub id, a checkpoint directory or a model)")
        source = (record.manifest.get("model") or {}).get("id")
    _check_model_source(source, record)
    with contextlib.ExitStack() as stack:
        try:
            src = stack.enter_context(export_source(source))
        except (ValueError, FileNotFoundError) as err:
            raise ValueError(f"cannot find the checkpoint of {source!r} ({err}); pass source= (the model or its checkpoint)") from err
        evaluation = dict(src.encoding)
        if record is not None:
            task_options = (record.manifest.get("task") or {}).get("options") or {}
            model_entry = record.manifest.get("model") or {}
            evaluation.update(dtype=model_entry.get("dtype"), chat_template=bool(task_options.get("chat_template", False)))
            if "bos" in model_entry:  # the BOS rule the run's prompts were encoded with
                evaluation.update(prepend_bos=bool(model_entry["bos"]["prepends_bos"]), bos=model_entry["bos"])
        provenance = {"source": src.as_dict(), "evaluation": evaluation, "run": _run_provenance(record) if record else None}
        return export_checkpoint(src.path, heads, out_dir, provenance=provenance, ablation=run_ablation(record))


def run_ablation(record: Optional[RunRecord]) -> Optional[Ablation]:
    """The ablation a run searched with, as it recorded it (``None``: the default kind, zero, which
    a manifest leaves out, or no run); a mean or resample run's export folds it into the output
    biases where exact."""
    kind = None if record is None else (record.manifest.get("options") or {}).get("ablation")
    if record is None or kind is None:
        return None
    if not ablation_kind(kind).learns:  # it learnt nothing, so the run recorded none: the kind itself
        return ablation_kind(kind)()
    recorded = recorded_ablation(record.events, kind)
    if recorded is not None:
        return recorded
    raise ValueError(f"{record.path} searched with {kind} ablation but recorded no learnt ablation to export")


@dataclass
class VerifyReport:
    """What :func:`verify_export` found: per-example decisions of the export on D_test against the
    run's recorded ablated evaluation, and the written files against their recorded sha256."""

    heads: str
    mode: str
    n: int
    matches: int
    mismatched_ids: list[str]
    recorded_accuracy: float
    exported_accuracy: float
    files_checked: int
    files_ok: int
    settings: dict[str, Any] = field(default_factory=dict)
    zeroed_ok: bool = True

    @property
    def ok(self) -> bool:
        """Every decision and every file matches, and the recorded heads are the zeroed slices."""
        return self.matches == self.n and self.files_ok == self.files_checked and self.zeroed_ok

    def __str__(self) -> str:
        lines = [
            f"{self.matches}/{self.n} per-example decisions on D_test equal the run's ablated evaluation of {self.heads} "
            f"({self.mode})",
            f"accuracy {self.exported_accuracy:.2%} (run: {self.recorded_accuracy:.2%}); "
            f"{self.files_ok}/{self.files_checked} files match their recorded sha256 (the record itself included); "
            + ("the recorded heads' slices are zero in the weights" if self.zeroed_ok
               else "the recorded heads are NOT the zeroed slices of the weights"),
        ]
        if self.mismatched_ids:
            lines.append("differing examples: " + ", ".join(self.mismatched_ids[:10]) + (" ..." if len(self.mismatched_ids) > 10 else ""))
        return "\n".join(lines)


def run_task(record: RunRecord, task: Optional[Task] = None, data_dir: Optional[str] = None) -> Task:
    """The run's task: ``task``, or the manifest's task loaded again (from ``data_dir``) with every
    loader option the manifest recorded (:func:`~cel_lens.tasks.loader_options`: the split seed,
    the prompt format, BoolQ's ``dist_from``, ...) and narrowed to the examples the run evaluated
    (:func:`~cel_lens.runs.manifest.rebuild_task`); each split must have the content hash the
    manifest recorded (D_dist only where ``task`` holds it)."""
    record = as_record(record)
    splits = record.manifest.get("splits") or {}
    if task is None:
        task = rebuild_task(record.manifest, data_dir)  # the examples the run evaluated, a cut Task's too
    for name in loaded_splits(task):
        label = {"dist": "D_dist", "test": "D_test"}[name]
        want = (splits.get(name) or {}).get("content_sha256")
        got = getattr(task, name).content_hash
        if want is not None and got != want:
            raise ValueError(
                f"the {label} loaded for verification is not the run's (content hash {got[:12]} != {want[:12]}): "
                "give the run's data directory (--data-dir) or task"
            )
    return task


def _check_files(out: Path, provenance: dict[str, Any]) -> tuple[int, int]:
    """``(files checked, files whose sha256 matches)``: every file the record lists, and the record
    itself against :data:`PROVENANCE_HASH_FILE` (missing: a mismatch)."""
    files = provenance.get("files") or {}
    ok = sum(1 for rel, sha in files.items() if (out / rel).is_file() and file_sha256(out / rel) == sha)
    sidecar = out / PROVENANCE_HASH_FILE
    recorded = sidecar.read_text(encoding="utf-8").split()[0] if sidecar.is_file() and sidecar.read_text().strip() else None
    return len(files) + 1, ok + int(recorded == file_sha256(out / PROVENANCE_FILE))


def heads_zeroed(out: Path, provenance: dict[str, Any]) -> bool:
    """Whether the edited tensors name exactly the recorded heads, and each head's slice is zero in
    the written weights (a record relabelled to other heads fails here as well as on its hash)."""
    from safetensors import safe_open

    edits, d_head = provenance.get("edited_tensors") or [], int(provenance.get("d_head") or 0)
    named = HeadSet.parse("+".join(h for e in edits for h in e.get("heads") or []) or None)
    if not edits or named != HeadSet.parse(provenance.get("heads")):
        return False
    for edit in edits:
        with safe_open(str(out / edit["file"]), framework="pt") as f:
            tensor = f.get_tensor(edit["tensor"])
        for head in HeadSet.parse("+".join(edit["heads"])):
            part = tensor[head.head] if provenance.get("kind") == "native" else tensor[:, head.head * d_head:(head.head + 1) * d_head]
            if bool(part.ne(0).any()):
                return False
    return True


def verify_export(
    out_dir: Union[str, os.PathLike],
    run: Any = None,
    *,
    task: Optional[Task] = None,
    data_dir: Optional[str] = None,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    batch_size: int = 8,
    progress: bool = False,
) -> VerifyReport:
    """Evaluate the export in ``out_dir`` on ``run``'s D_test with plain ``transformers`` and compare
    each per-example decision with the run's recorded D_test evaluation of S-hat; check every file's
    sha256, the record's own (:data:`~cel_lens.model.checkpoint_edit.PROVENANCE_HASH_FILE`), and that the
    recorded heads are exactly the zeroed slices. ``run`` defaults to the run the record names.

    D_test is ``task``'s or the run's task loaded again (from ``data_dir``), checked against the
    manifest's content hash; ``dtype`` defaults to the run's model dtype. A TransformerLens-native
    export (the organism) has no ``transformers`` form: it is loaded with ``load_model`` and
    evaluated without any ablation hook.
    """
    out = Path(out_dir)
    if not (out / PROVENANCE_FILE).is_file():
        raise FileNotFoundError(f"{out} is not a cel_lens export (no {PROVENANCE_FILE})")
    provenance = json.loads((out / PROVENANCE_FILE).read_text(encoding="utf-8"))
    if run is None:
        run = (provenance.get("run") or {}).get("path")
        if run is None:
            raise ValueError(f"{out} was exported from heads, not a run: give the run directory whose decisions it must make")
    record = as_record(run)
    heads = selected_heads(record)
    if HeadSet.parse(provenance.get("heads")) != heads:
        raise ValueError(f"{out} removes {provenance.get('heads')} but {record.path} selected {heads}")
    recorded = [e for e in record.evaluations if e.split == "test" and e.heads == heads]
    if not recorded:
        raise ValueError(f"{record.path} has no recorded D_test evaluation of {heads} (the search has not reached the test split)")
    split = run_task(record, task, data_dir).test
    files_checked, files_ok = _check_files(out, provenance)
    zeroed_ok = heads_zeroed(out, provenance)
    dtype = canonical_dtype(dtype or (record.manifest.get("model") or {}).get("dtype") or "float32")
    settings = dict(provenance.get("evaluation") or encoding_defaults(out))
    if provenance.get("kind") == "native":
        model = load_model(out, device=device, dtype=dtype)
        result = evaluate(model, split, None, batch_size=batch_size, progress=progress)
        mode = f"cel_lens on the native checkpoint, no ablation hooks, {dtype}"
    else:
        plain = load_plain_model(out, prepend_bos=settings["prepend_bos"], n_ctx=settings.get("n_ctx"), device=device, dtype=dtype)
        result = evaluate_plain(plain, split, batch_size=batch_size, progress=progress)
        mode = f"plain transformers, {dtype}, {plain.device}"
    source = record.manifest.get("model") or {}  # the read is the source model's: its id and weights hash
    reader = SealReader(f"export verify ({out})", key=default_run_dir(record.manifest, root="").name)  # the run's own
    record_test_read(str(source.get("id", "unknown")), split, [heads], weights=source.get("weights_sha256"), reader=reader)
    mine, theirs = result.correct[0], recorded[-1].correct
    if mine.shape != theirs.shape:
        raise ValueError(f"the run recorded {theirs.shape[0]} D_test decisions, the export made {mine.shape[0]}")
    differ = (mine != theirs).nonzero()[:, 0].tolist()
    return VerifyReport(
        heads=str(heads), mode=mode, n=int(theirs.shape[0]), matches=int(theirs.shape[0]) - len(differ),
        mismatched_ids=[split.ids[i] for i in differ], recorded_accuracy=float(theirs.float().mean()),
        exported_accuracy=float(mine.float().mean()), files_checked=files_checked, files_ok=files_ok,
        settings={**settings, "dtype": dtype, "source": (provenance.get("source") or {}).get("id")}, zeroed_ok=zeroed_ok,
    )
