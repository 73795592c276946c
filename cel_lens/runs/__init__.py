"""Run directories: what a search was asked, everything it evaluated, what it found; resume.

* :mod:`~cel_lens.runs.directory`: :class:`RunDir` (``manifest.json``, append-only
  ``evaluations.jsonl``, ``result.json``);
* :mod:`~cel_lens.runs.recording`: :class:`RecordingOracle`, the oracle that records and resumes;
* :mod:`~cel_lens.runs.manifest`: the manifest of a run and its default directory;
* :mod:`~cel_lens.runs.loading`: :func:`load_run`; :mod:`~cel_lens.runs.records`: one evaluation;
* :mod:`~cel_lens.runs.lock`: one writer per directory; :mod:`~cel_lens.runs.files`: checksummed
  lines, atomic files, write errors that name their file.
"""

from cel_lens.runs.directory import (
    EVALUATIONS,
    MANIFEST,
    RESULT,
    RunConfigError,
    RunDir,
    RunReadOnlyError,
    manifest_diff,
)
from cel_lens.runs.files import RunRecordError, RunWriteError
from cel_lens.runs.lock import RunBusyError
from cel_lens.runs.loading import RunRecord, load_run
from cel_lens.runs.manifest import build_manifest, default_run_dir, package_versions
from cel_lens.runs.recording import CachedOracle, RecordingOracle
from cel_lens.runs.records import Evaluation, decode_bits, encode_bits

__all__ = [
    "RunDir",
    "RunConfigError",
    "RunBusyError",
    "RunReadOnlyError",
    "RunRecordError",
    "RunWriteError",
    "manifest_diff",
    "MANIFEST",
    "EVALUATIONS",
    "RESULT",
    "RunRecord",
    "load_run",
    "build_manifest",
    "default_run_dir",
    "package_versions",
    "RecordingOracle",
    "CachedOracle",
    "Evaluation",
    "encode_bits",
    "decode_bits",
]
