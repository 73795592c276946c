"""Run directories: what a search was asked, everything it evaluated, what it found; resume.

* :mod:`~cel_lens.runs.run_dir`: :class:`RunDir` (``manifest.json``, append-only
  ``evaluations.jsonl``, ``result.json``);
* :mod:`~cel_lens.runs.recording_oracle`: :class:`RecordingOracle`, the oracle that records and resumes;
* :mod:`~cel_lens.runs.manifest`: the manifest of a run and its default directory;
* :mod:`~cel_lens.runs.reader`: :func:`load_run`; :mod:`~cel_lens.runs.evaluation_record`: one evaluation;
* :mod:`~cel_lens.runs.lock`: one writer per directory; :mod:`~cel_lens.runs.journal_io`: checksummed
  lines, atomic files, write errors that name their file;
* :mod:`~cel_lens.runs.run_precision`: a search's compute precision, set, said, restored and recorded.
"""

from cel_lens.runs.run_dir import (
    EVALUATIONS,
    MANIFEST,
    RESULT,
    RunConfigError,
    RunDir,
    RunReadOnlyError,
    manifest_diff,
)
from cel_lens.runs.journal_io import RunRecordError, RunWriteError
from cel_lens.runs.lock import RunBusyError
from cel_lens.runs.reader import RunRecord, load_run
from cel_lens.runs.manifest import build_manifest, default_run_dir, package_versions
from cel_lens.runs.recording_oracle import CachedOracle, RecordingOracle
from cel_lens.runs.evaluation_record import Evaluation, decode_bits, encode_bits

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
