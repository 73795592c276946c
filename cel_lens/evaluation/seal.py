"""The sealed test split: a ledger of every read of D_test, that any later search can see.

Every evaluation of a split named ``"test"`` goes through :func:`cel_lens.evaluation.evaluate`
(``cl.evaluate``, :func:`cel_lens.analysis.flipped_examples`, ``cel-lens evaluate``, the local and
Ray backends, ``MemoOracle(guard_test=False)`` over a model...), and that one choke point appends
a line to the ledger: which model, which test examples (by the split's content hash, with the
example ids written once per hash), which head sets, when, and by which entry point
(its :class:`SealReader`; ``"evaluate"`` when no caller said). A search asks :func:`recorded_reads` when it
fixes its selection: any read of one of its D_test examples by the same model before that moment
makes ``selected_before_test`` false, with the reads as the reason.

The ledger is keyed on content, not names: a read carries the model's id, its weights hash
(:func:`weights_key`; a renamed copy of a model matches) *and* a fingerprint that survives a copy
loaded in another dtype (:func:`weights_identity`), and each split's examples are written once with
their content hashes (a renamed copy of the split, a list of examples, the same rows under another
task name or none all match). Every split is recorded whatever it is named: a split named
``"dist"`` holding D_test rows is a D_test read (such reads are recorded once per model and rows in
a process, without their head sets, since a search reads its D_dist many times); every ledger file
is consulted. A cut last line is repaired before the next append.

The ledger is one append-only JSONL file per task under :func:`ledger_dir` (``$CEL_LENS_LEDGER``,
else ``$CEL_LENS_CACHE/test_reads``, else ``~/.cache/cel_lens/test_reads``). Writers take an
exclusive ``flock`` (one per open file description, so threads of one process take turns too),
readers a shared one: safe across processes and threads. A read outside any search warns in one
line that it breaks the seal (:data:`SEAL_WARNING`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from cel_lens.heads import HeadSet
from cel_lens.model.identity import model_id, weights_fingerprint, weights_hash
from cel_lens.tasks.base import Split

__all__ = ["TEST_SPLIT_NAME", "DIST_SPLIT_NAME", "SEAL_WARNING", "ledger_dir", "ledger_file", "SealReader",
           "record_test_read", "recorded_reads", "read_example_ids", "summarize_read", "describe_reads", "weights_key",
           "weights_identity"]

TEST_SPLIT_NAME = "test"
"""The split name whose reads warn when no caller claims them."""
DIST_SPLIT_NAME = "dist"
"""The one split name whose reads are not recorded (the discovery split a search selects on)."""
SEAL_WARNING = (
    "reading D_test of {task} with {model} breaks its seal: a later search of this model on this task "
    "will report that its selection was not fixed before D_test was read (explore on D_dist instead)"
)
"""The one line a read of D_test outside a search prints (as a :class:`UserWarning`)."""



@dataclass(frozen=True)
class SealReader:
    """Who reads D_test, as the ledger records it: ``entry`` (``"search <run>"``, ``"cel-lens
    evaluate"``, ...) and ``key``, which names a search configuration: its own reads after its
    selection do not mark a later search of the same configuration, whose selection, a function of
    D_dist alone, they cannot have changed (:func:`recorded_reads` ``exclude_key``). A read with a
    reader prints no seal warning (the caller owns it). It travels in the evaluation's context
    (:class:`~cel_lens.evaluation.context.EvalContext`)."""

    entry: str
    key: Optional[str] = None


_KNOWN: set[tuple[str, str]] = set()  # (ledger file, split hash) whose ids this process knows are written


def ledger_dir() -> Path:
    """Where the ledger lives: ``$CEL_LENS_LEDGER``, else ``$CEL_LENS_CACHE/test_reads``, else
    ``$XDG_CACHE_HOME/cel_lens/test_reads`` (``~/.cache`` by default)."""
    if os.environ.get("CEL_LENS_LEDGER"):
        return Path(os.environ["CEL_LENS_LEDGER"])
    cache = os.environ.get("CEL_LENS_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cel_lens"
    return Path(cache) / "test_reads"


def ledger_file(task: str) -> Path:
    """The ledger file of ``task`` (its name made safe for a file name)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", task or "unnamed") or "unnamed"
    return ledger_dir() / f"{safe}.jsonl"


@contextlib.contextmanager
def _locked(path: Path, exclusive: bool) -> Iterator[Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            fh.seek(0)
            yield fh
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _lines(fh: Any) -> list[dict[str, Any]]:
    out = []
    for line in fh.read().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a crash: the rest of the ledger still counts
    return out


def _repair_tail(fh: Any) -> None:
    """Cut a partial last line (a short write: ``RLIMIT_FSIZE``, a kill, a full disk) back to the
    last newline before appending, as run directories do (:meth:`cel_lens.runs.RunDir`), so the next
    record starts on a line of its own instead of being glued onto the cut one and lost."""
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    if size == 0:
        return
    fh.buffer.seek(size - 1)
    if fh.buffer.read(1) == b"\n":
        return
    fh.buffer.seek(0)
    data = fh.buffer.read()
    fh.truncate(data.rfind(b"\n") + 1)
    fh.flush()
    os.fsync(fh.fileno())


def weights_key(model: Any) -> Optional[str]:
    """The model's weights hash (:func:`cel_lens.model.identity.weights_hash`, what run manifests
    record as ``weights_sha256``; ``None`` for a name): equal for a renamed copy of the same
    weights in the same dtype. Cached on the model until a parameter changes in place."""
    keys = _weights_keys(model)
    return keys[0] if keys else None


def weights_identity(model: Any) -> Optional[str]:
    """The model's weights fingerprint (:func:`cel_lens.model.identity.weights_fingerprint`; ``None``
    for a name): equal for a copy of the checkpoint loaded in another dtype (float32 and bfloat16).
    What the seal matches a model on, beside its id and :func:`weights_key`."""
    keys = _weights_keys(model)
    return keys[1] if keys else None


def _weights_keys(model: Any) -> Optional[tuple[str, str]]:
    """``(weights hash, dtype-free fingerprint)``, cached on the model until a parameter changes in
    place (its ``_version`` counter)."""
    if isinstance(model, str) or not hasattr(model, "named_parameters"):
        return None
    version = sum(int(getattr(p, "_version", 0)) for p in model.parameters())
    cached = model.__dict__.get("_cel_lens_weights")
    if cached is not None and cached[0] == version and len(cached) == 3:
        return cached[1], cached[2]
    keys = (weights_hash(model), weights_fingerprint(model))
    model.__dict__["_cel_lens_weights"] = (version, *keys)
    return keys


def _identity(model: Any, weights: Optional[str] = None) -> tuple[str, Optional[str], Optional[str]]:
    """``(model id, weights hash, fingerprint)`` of a model object, or ``(name, weights, None)`` for a name."""
    if isinstance(model, str):
        return model, weights, None
    keys = _weights_keys(model)
    return model_id(model), keys[0] if keys else None, keys[1] if keys else None


_DIST_SEEN: set[tuple[str, str, str]] = set()  # (ledger file, model, split hash) of "dist" reads this process recorded


def record_test_read(model: Any, split: Split, head_sets: Sequence[HeadSet], *, reader: Optional[SealReader] = None,
                     weights: Optional[str] = None) -> None:
    """Append a read of ``split`` by ``model`` (the model, or its id) with ``head_sets`` to the ledger,
    keyed on content: the weights' fingerprint (:func:`weights_key`) and each example's content
    hash, whatever the model, split or task is called. Every split is recorded (a copy of D_test
    named ``"dist"``, examples passed as a list, a split without a task; one named ``"dist"`` once per
    model and rows in a process); a read of a split named ``"test"`` that no caller claimed (no
    ``reader``) warns (:data:`SEAL_WARNING`). ``weights``: the weights hash when ``model`` is given by
    name (an export's verify records its reads as the source model's, with the hash its run manifest holds)."""
    owner, key = (reader.entry, reader.key) if reader is not None else (None, None)
    mid, weights, identity = _identity(model, weights)
    digest = split.content_hash
    path = ledger_file(split.task)
    dist = split.name == DIST_SPLIT_NAME
    if dist:  # recorded too (D_test renamed "dist" is still D_test), once per model and rows in a process
        seen = (str(path), f"{mid}|{weights}|{identity}", digest)
        if seen in _DIST_SEEN:
            return
        _DIST_SEEN.add(seen)
    if split.name == TEST_SPLIT_NAME and owner is None:
        warnings.warn(SEAL_WARNING.format(task=split.task or "this task", model=mid), UserWarning, stacklevel=3)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")
    read = {"kind": "read", "time": now, "model": mid, "weights": weights, "weights_id": identity, "task": split.task,
            "split_name": split.name, "split": digest, "n": len(split),
            "head_sets": [] if dist else [str(h) for h in head_sets], "n_head_sets": len(head_sets),
            "entry": owner or "evaluate", "key": key, "pid": os.getpid(), "host": socket.gethostname()}
    with _locked(path, exclusive=True) as fh:
        # the split's ids and content hashes are written once; a process reads the ledger for that once
        known = (str(path), digest) in _KNOWN or any(e.get("kind") == "split" and e.get("split") == digest and "hashes" in e
                                                   for e in _lines(fh))
        _KNOWN.add((str(path), digest))
        lines = [] if known else [{"kind": "split", "split": digest, "ids": split.ids,
                                   "hashes": [e.content_hash for e in split.examples]}]
        _repair_tail(fh)
        fh.seek(0, os.SEEK_END)
        fh.write("".join(json.dumps(e) + "\n" for e in [*lines, read]))
        fh.flush()
        os.fsync(fh.fileno())


def _all_entries() -> list[dict[str, Any]]:
    """Every line of every ledger file (each task's, the unnamed one, older ones): a read counts
    whatever task name it was filed under."""
    folder = ledger_dir()
    if not folder.is_dir():
        return []
    entries: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        with _locked(path, exclusive=False) as fh:
            entries += _lines(fh)
    return entries


def recorded_reads(model: Any, split: Split, *, exclude_key: Optional[str] = None) -> list[dict[str, Any]]:
    """Recorded reads by ``model`` (the model, matched on its weights' fingerprint and on its id;
    or an id) of any example of ``split`` (matched on content hashes; on ids for lines written
    before hashes were), in any ledger file, oldest first; reads made under ``exclude_key`` (the
    same search configuration, :class:`SealReader`) left out."""
    mid, weights, identity = _identity(model)
    entries = _all_entries()
    hashes = {e.content_hash for e in split.examples}
    ids = set(split.ids)
    overlapping = {split.content_hash}
    for e in entries:
        if e.get("kind") == "split" and (hashes & set(e.get("hashes") or []) or ("hashes" not in e and ids & set(e.get("ids") or []))):
            overlapping.add(e["split"])

    def same_model(e: dict[str, Any]) -> bool:
        return (e.get("model") == mid or (weights is not None and e.get("weights") == weights)
                or (identity is not None and e.get("weights_id") == identity))

    reads = [e for e in entries if e.get("kind") == "read" and same_model(e) and e.get("split") in overlapping
             and (exclude_key is None or e.get("key") != exclude_key)]
    return sorted(reads, key=lambda e: str(e.get("time")))


def read_example_ids(task: str, model: Optional[str] = None) -> set[str]:
    """Ids of every example of a test split a read filed under ``task`` covered, by ``model`` (its
    id as the ledger records it; any model when None), from every ledger file: the rows a new D_test
    of ``task`` should avoid (``scripts/read_rows.py``)."""
    entries = _all_entries()
    ids = {e["split"]: e.get("ids") or [] for e in entries if e.get("kind") == "split"}
    read = {e.get("split") for e in entries if e.get("kind") == "read" and e.get("task") == task
            and e.get("split_name") != DIST_SPLIT_NAME and (model is None or e.get("model") == model)}
    return {i for h in read for i in ids.get(h, ())}


def summarize_read(read: dict[str, Any]) -> dict[str, Any]:
    """A ledger read without its head-set list (what a result and a journal keep): entry point,
    time, model, process and how many head sets were read."""
    keep = {k: read.get(k) for k in ("entry", "time", "model", "task", "pid", "host", "n")}
    n_sets = read.get("n_head_sets")
    return {**keep, "n_head_sets": int(n_sets) if n_sets is not None else len(read.get("head_sets") or [])}


def describe_reads(reads: Sequence[dict[str, Any]], limit: int = 3) -> str:
    """One line that says what read D_test before (the first ``limit`` reads, then a count)."""
    if not reads:
        return "no recorded read of D_test"
    shown = "; ".join(
        f"{r.get('entry', '?')} at {r.get('time', '?')} ({summarize_read(r)['n_head_sets']} head sets)" for r in reads[:limit]
    )
    more = f"; and {len(reads) - limit} more" if len(reads) > limit else ""
    return f"D_test was read {len(reads)} time(s) before the selection: {shown}{more}"
