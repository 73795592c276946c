"""What the subcommands share: the help formatter, JSON output, model/task options and loading.

Subcommand modules import heavy packages (torch, plotly) inside their ``run`` functions, so that
``cel-lens --help`` and argument errors answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from cel_lens.cli.options import FLAGS, LOAD_FIELDS, add_fields
from cel_lens.cli.options import settings_from_args as _settings
from cel_lens.config import ExecutionSettings, OptionError, SearchConfig, check_max_new_tokens, check_split_sizes

if TYPE_CHECKING:  # pragma: no cover
    from cel_lens.tasks.base import Task

__all__ = [
    "Formatter", "print_json", "json_stdout", "FLAGS", "flag_message", "add_model_task_options", "add_load_options", "settings_from_args",
    "allow_code_execution", "check_names_first", "task_options_from_args", "parse_task_options", "load_task_from_args", "load_model_and_task",
]


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help text with defaults and the description's own line breaks.

    A default is shown once: appended as ``(default: X)`` when it is a value, left out when the
    help text says what the default is in words, or when there is none to show (``None``, or an
    on/off flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default is None or action.default is False or action.nargs == 0:
            return text
        return super()._get_help_string(action)


def print_json(obj: object) -> None:
    """Print ``obj`` as indented JSON (non-JSON values as their ``str``)."""
    print(json.dumps(obj, indent=2, default=str))


@contextmanager
def json_stdout(enabled: bool = True) -> Iterator[None]:
    """While the block runs, whatever would reach stdout goes to stderr instead: Python prints and,
    at the file-descriptor level, C libraries, subprocesses and Ray's forwarded worker output. So
    under ``--json`` stdout carries the JSON printed after the block, and nothing else."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved_fd, saved_stdout = os.dup(1), sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved_stdout


def flag_message(err: OptionError) -> str:
    """``err``'s message naming the command-line flag instead of the field (``--pool must be >= 1``)."""
    flag = FLAGS.get(err.option, "--" + err.option.replace("_", "-"))
    msg = str(err)
    return flag + msg[len(err.option):] if msg.startswith(err.option + " ") else f"{flag}: {msg}"


def add_model_task_options(p: argparse.ArgumentParser, *, model_required: bool = True) -> None:
    """The options every model-and-task subcommand takes (``search``, ``evaluate``)."""
    p.add_argument("--model", required=model_required,
                   help="hub id, local checkpoint directory, .gguf file, short name (see 'cel-lens models'), or 'organism'")
    p.add_argument("--task", required=True, help="task name (see 'cel-lens tasks'), or any lm-evaluation-harness task: "
                   "lm_eval:NAME or path/to/task.yaml")
    p.add_argument("--include-path", action="append", default=[], metavar="DIR",
                   help="a folder of lm-eval task YAMLs for --task lm_eval:NAME (as lm-eval's --include_path; repeatable)")
    p.add_argument("--n-dist", type=int, default=None, help="discovery examples (default: the paper's size)")
    p.add_argument("--n-test", type=int, default=None, help="test examples (default: the paper's size)")
    p.add_argument("--data-dir", default=None, help="read task files from this directory instead of the hub")
    add_fields(p, SearchConfig, ("seed", "split_seed"))
    add_load_options(p)
    p.add_argument("--allow-code-execution", action="store_true",
                   help="let generation tasks (MBPP) run model-written code in the sandbox")
    p.add_argument("--chat-template", action="store_true",
                   help="wrap each prompt in the tokenizer's chat template (Instruct models; recorded in the run)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens a generation task (MBPP) may generate (default: the task's, 256 for MBPP)")
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the task's loader, recorded in the run (repeatable; VALUE read as JSON if it "
                   "parses, else as text), e.g. dist_from=validation for BoolQ without its train file")
    add_fields(p, ExecutionSettings, ("progress",))


def add_load_options(p: argparse.ArgumentParser) -> None:
    """How a model given by name is loaded and run (:class:`~cel_lens.config.ExecutionSettings`'
    fields, :mod:`~cel_lens.cli.options`)."""
    add_fields(p, ExecutionSettings, LOAD_FIELDS)


def allow_code_execution(args: argparse.Namespace) -> None:
    """Opt in to running generated code when ``--allow-code-execution`` was given."""
    if args.allow_code_execution:
        from cel_lens.sandbox import ALLOW_ENV

        os.environ[ALLOW_ENV] = "1"


def settings_from_args(args: argparse.Namespace, **extra: Any) -> ExecutionSettings:
    """The checked :class:`~cel_lens.config.ExecutionSettings` of the model options (and ``extra``)."""
    return _settings(args, **extra)


def check_names_first(args: argparse.Namespace) -> None:
    """Fail fast on an unknown task name, then on a model that cannot load (unknown name, not a
    checkpoint, a hub model neither cached nor reachable), before the task's data is read or
    anything is loaded; then, when the task may come from the hub and the hub cannot be reached,
    turn offline mode on for this process, so the task's data error comes at once instead of after
    the hub client's retries."""
    from cel_lens.model.hub import check_model_name, hub_offline, hub_reachable
    from cel_lens.tasks.registry import task_info

    task_info(args.task)
    check_model_name(args.model)
    local_data = args.data_dir is not None or os.environ.get("CEL_LENS_DATA_DIR")
    if not local_data and not hub_offline() and not hub_reachable():
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"


def task_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The task options the flags set (``--chat-template``, ``--max-new-tokens``), checked against
    what the task is: a generation budget for a task that does not generate is refused."""
    from cel_lens.tasks.answer_types import answer_type_entry
    from cel_lens.tasks.registry import task_info

    options: dict[str, Any] = {}
    if getattr(args, "chat_template", False):
        options["chat_template"] = True
    budget = getattr(args, "max_new_tokens", None)
    if budget is not None:
        answer_type = task_info(args.task).get("answer_type")
        if answer_type is not None and not answer_type_entry(answer_type).generates:  # None: an lm-eval task by name, whose loader checks it
            raise OptionError(
                "max_new_tokens", f"max_new_tokens applies to generation tasks (mbpp); {args.task} is {answer_type}"
            )
        check_max_new_tokens(budget)
        options["max_new_tokens"] = budget
    if getattr(args, "include_path", None):
        options["include_path"] = list(args.include_path)
    for key, value in parse_task_options(getattr(args, "task_option", None) or []).items():
        if key == "splits":
            raise OptionError("task_option", "splits is not a loader option (the subcommand reads the splits it needs)")
        if key in RESERVED_TASK_OPTIONS:
            raise OptionError("task_option", f"{key}: use its own flag ({RESERVED_TASK_OPTIONS[key]})")
        options[key] = value
    return options


RESERVED_TASK_OPTIONS = {
    "n_dist": "--n-dist", "n_test": "--n-test", "seed": "--seed, or --split-seed for the splits alone",
    "split_seed": "--split-seed", "data_dir": "--data-dir", "chat_template": "--chat-template",
    "max_new_tokens": "--max-new-tokens", "include_path": "--include-path",
}
"""Loader arguments that flags of their own set, with the flag: ``--task-option`` refuses each (and
``splits``) with one line naming it (passed twice, the loader would end in a ``TypeError``)."""


def parse_task_options(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` texts as loader options (VALUE as JSON when it parses: ``n=3`` is an int,
    ``dist_from=validation`` text); a malformed one is a one-line error."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, raw = str(item).partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise OptionError("task_option", f"wants KEY=VALUE with KEY a name, got {item!r}")
        if key in options:
            raise OptionError("task_option", f"{key} given twice")
        try:
            options[key] = json.loads(raw)
        except ValueError:
            options[key] = raw
    return options


def load_task_from_args(args: argparse.Namespace, splits: Sequence[str] = ("dist", "test")) -> "Task":
    """The task the options name (cheap: a wrong name or data directory fails before a model loads);
    ``splits``: only those (an evaluation of one split reads only that split's files)."""
    from cel_lens.tasks.registry import load_task

    seed = args.seed if getattr(args, "split_seed", None) is None else args.split_seed
    return load_task(
        args.task, n_dist=args.n_dist, n_test=args.n_test, seed=seed, data_dir=args.data_dir, splits=tuple(splits),
        **task_options_from_args(args),
    )


def load_model_and_task(args: argparse.Namespace) -> tuple[Any, "Task"]:
    """The model and task the options name: options checked first, then the model's name (cheaply),
    then the task read, then the model loaded."""
    from cel_lens.model.load import load_model

    settings = settings_from_args(args)
    split = getattr(args, "split", None)
    if split is not None:  # only the split evaluated needs examples
        check_split_sizes(**{f"n_{split}": getattr(args, f"n_{split}")})
    allow_code_execution(args)
    task_options_from_args(args)
    check_names_first(args)
    task = load_task_from_args(args, splits=(split,) if split is not None else ("dist", "test"))
    if split is not None and len(task.split(split)) == 0:
        raise ValueError(f"task {task.name!r} has no {split} examples to evaluate")
    model = load_model(args.model, **settings.load_options())
    return model, task
