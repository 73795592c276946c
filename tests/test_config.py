"""Every option of a search is checked by ``validate()`` with one message naming it."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

from cel_lens.config import (
    ExecutionSettings,
    OptionError,
    SearchConfig,
    canonical_dtype,
    check_max_new_tokens,
    check_split_sizes,
)

CONFIG_CASES = [
    (dict(k=0), "k", "k must be >= 1, got 0"),
    (dict(k=1.5), "k", "k must be an integer, got 1.5"),
    (dict(k=True), "k", "k must be an integer, got True"),
    (dict(pool_size=0), "pool_size", "pool_size must be >= 1, got 0"),
    (dict(scorer="psychic"), "scorer", "unknown scorer 'psychic'; choose one of exact, attribution, compressed"),
    (dict(strategy="random"), "strategy", "unknown strategy 'random'; choose one of exhaustive, beam"),
    (dict(beam_width=0), "beam_width", "beam_width must be >= 1, got 0"),
    (dict(n_null=0), "n_null", "n_null must be >= 1, got 0 (the random-subset null needs at least one head set)"),
    (dict(n_boot=0), "n_boot", "n_boot must be >= 1, got 0"),
    (dict(posthoc="no"), "posthoc", "posthoc must be True or False, got 'no'"),
    (dict(seed=-1), "seed", "seed must be >= 0, got -1"),
    (dict(seed="0"), "seed", "seed must be an integer, got '0'"),
    (dict(n_masks=0), "n_masks", "n_masks must be >= 1, got 0"),
    (dict(sparsity=1.0), "sparsity", "sparsity must lie in (0, 1), got 1.0"),
    (dict(sparsity="0.1"), "sparsity", "sparsity must lie in (0, 1), got '0.1'"),
    (dict(store_dtype="float17"), "store_dtype", "unknown dtype 'float17'"),
]

SETTINGS_CASES = [
    (dict(device=0), "device", "device must be a name such as 'cpu' or 'cuda:0', got 0"),
    (dict(dtype="float17"), "dtype", "unknown dtype 'float17'"),
    (dict(loader="magic"), "loader", "unknown loader 'magic'; choose one of auto, hooked, bridge"),
    (dict(bos="sometimes"), "bos", "unknown bos 'sometimes'; choose one of tokenizer, always, never"),
    (dict(batch_size=0), "batch_size", "batch_size must be >= 1, got 0"),
    (dict(batch_size=2.0), "batch_size", "batch_size must be an integer, got 2.0"),
    (dict(use_store=1), "use_store", "use_store must be True or False, got 1"),
    (dict(store_budget=-1), "store_budget", "store_budget must be >= 0, got -1"),
    (dict(progress=None), "progress", "progress must be True or False, got None"),
    (dict(backend="spark"), "backend", "unknown backend 'spark'; choose one of local, ray"),
    (dict(workers=0), "workers", "workers must be >= 1, got 0"),
    (dict(gpus_per_worker=-0.5), "gpus_per_worker", "gpus_per_worker must be a number >= 0, got -0.5"),
    (dict(gpus_per_worker=float("nan")), "gpus_per_worker", "gpus_per_worker must be a number >= 0, got nan"),
]


@pytest.mark.parametrize("kwargs, option, message", CONFIG_CASES, ids=[c[2] for c in CONFIG_CASES])
def test_search_config_names_the_bad_option(kwargs, option, message):
    with pytest.raises(OptionError) as err:
        SearchConfig(**kwargs).validate()
    assert err.value.option == option and str(err.value).startswith(message)
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)


@pytest.mark.parametrize("kwargs, option, message", SETTINGS_CASES, ids=[c[2] for c in SETTINGS_CASES])
def test_execution_settings_name_the_bad_setting(kwargs, option, message):
    with pytest.raises(OptionError) as err:
        ExecutionSettings(**kwargs).validate()
    assert err.value.option == option and str(err.value).startswith(message)


def test_defaults_and_good_values_pass():
    assert SearchConfig().validate() == SearchConfig()
    SearchConfig(k=1, pool_size=1, n_null=1, n_boot=1, seed=0, n_masks=1, sparsity=0.5, store_dtype="bf16",
                 strategy="beam", beam_width=1, posthoc=False).validate()
    ExecutionSettings(device="cpu", dtype=torch.float16, batch_size=1, store_budget=0, workers=1,
                      gpus_per_worker=0.5, backend="ray").validate()
    check_split_sizes(None, None)
    check_split_sizes(1, 1)
    assert canonical_dtype("torch.bfloat16") == canonical_dtype("bf16") == "bfloat16"


@pytest.mark.parametrize("n_dist, n_test, option", [(0, None, "n_dist"), (None, 0, "n_test"), (2, -3, "n_test"), (1.0, 1, "n_dist")])
def test_split_sizes(n_dist, n_test, option):
    with pytest.raises(OptionError) as err:
        check_split_sizes(n_dist, n_test)
    assert err.value.option == option


def test_split_seed_follows_seed_unless_given():
    assert SearchConfig(seed=7).task_seed == 7
    assert SearchConfig(seed=7, split_seed=2).task_seed == 2


def test_split_seed_and_specificity_are_recorded_only_when_set():
    """Run directories made before these options existed keep their identity."""
    plain = SearchConfig().manifest_options()
    assert "split_seed" not in plain and "n_specificity" not in plain
    both = SearchConfig(split_seed=0, n_specificity=10).manifest_options()
    assert both["split_seed"] == 0 and both["n_specificity"] == 10
    assert {k: v for k, v in both.items() if k not in ("split_seed", "n_specificity")} == plain


@pytest.mark.parametrize("field,value", [("split_seed", -1), ("split_seed", 1.5), ("n_specificity", -2)])
def test_bad_split_seed_and_specificity_fail_before_any_work(field, value):
    with pytest.raises(ValueError, match=field):
        SearchConfig(**{field: value}).validate()


def test_load_options_carry_the_bos_rule_only_when_set():
    """Every place that loads a model by name gets the same keyword arguments from the settings."""
    assert ExecutionSettings(device="cpu").load_options() == {"device": "cpu", "dtype": None, "loader": "auto"}
    assert ExecutionSettings(loader="hooked", bos="never").load_options() == {
        "device": None, "dtype": None, "loader": "hooked", "bos": "never"}


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "8"])
def test_a_bad_generation_budget_is_refused(value):
    with pytest.raises(OptionError, match="max_new_tokens"):
        check_max_new_tokens(value)
    check_max_new_tokens(None), check_max_new_tokens(1)


def test_every_option_has_a_rule_on_its_field():
    """Validation reads its rules from the fields' metadata (check_fields): every field but a plain
    flag carries one, so a new option cannot go unchecked, and a rule added there is enforced."""
    import dataclasses

    from cel_lens.config import check_fields

    rules = {"choices", "min", "interval", "dtype", "text"}
    for cls in (SearchConfig, ExecutionSettings):
        for f in dataclasses.fields(cls):
            assert f.type == "bool" or rules & set(f.metadata), f"{cls.__name__}.{f.name} has no rule"

    @dataclasses.dataclass
    class Toy:
        share: float = dataclasses.field(default=0.5, metadata={"interval": "(0, 1]"})
        count: Optional[int] = dataclasses.field(default=None, metadata={"min": 2, "why": " (two at least)"})

    check_fields(Toy()), check_fields(Toy(1.0, 2))
    with pytest.raises(OptionError, match=r"share must lie in \(0, 1\], got 0.0"):
        check_fields(Toy(0.0))
    with pytest.raises(OptionError, match=r"count must be >= 2, got 1 \(two at least\)"):
        check_fields(Toy(count=1))
    with pytest.raises(OptionError, match="ray_address must be 'auto' or HOST:PORT, got 5"):
        ExecutionSettings(ray_address=5).validate()


def test_each_search_default_is_written_once():
    """Functions that take a search option alone, and a Result read back without it, default to
    SearchConfig's own default (the one place it is written)."""
    import inspect

    from cel_lens.selection.algorithm import stage2
    from cel_lens.selection.guardrails import selection_adjusted_test
    from cel_lens.selection.paired import paired_interval
    from cel_lens.selection.parsimony import select_parsimonious
    from cel_lens.selection.plan import plan_search
    from cel_lens.selection.result import Result

    config = SearchConfig()
    for fn, names in ((stage2, {"k": "k", "strategy": "strategy", "beam_width": "beam_width"}),
                      (selection_adjusted_test, {"n_permutations": "n_adjusted"}),
                      (paired_interval, {"method": "ci_method", "n_boot": "n_boot"}),
                      (select_parsimonious, {"rule": "parsimony"}),
                      (plan_search, {"n_null": "n_null", "pool_size": "pool_size", "sparsity": "sparsity"})):
        params = inspect.signature(fn).parameters
        for param, option in names.items():
            assert params[param].default == getattr(config, option), (fn.__name__, param)
    from cel_lens.selection.result_parts import NullTest, TestOutcome

    for cls, options in ((Result, ("strategy", "n_boot", "ablation")), (NullTest, ("n_null",)), (TestOutcome, ("ci_method",))):
        fields = {f.name: f.default for f in cls.__dataclass_fields__.values()}
        for option in options:
            assert fields[option] == getattr(config, option), (cls.__name__, option)


def test_the_manifest_reads_which_options_to_record_from_the_fields():
    """manifest_options follows each field's ``manifest`` metadata (a run's identity: the options of
    run directories made before stay as they were), so a new option is recorded by declaring it."""
    import dataclasses

    assert SearchConfig().manifest_options() == {
        "k": 3, "pool_size": 12, "scorer": "exact", "seed": 0, "n_null": 100, "n_boot": 10000, "strategy": "exhaustive",
        "beam_width": None, "n_masks": None, "sparsity": None, "posthoc": False, "store_dtype": None,
        "parsimony": "backward", "ci_method": "tango", "n_adjusted": 999,
    }
    beam = SearchConfig(strategy="beam", beam_width=3, store_dtype="fp16", ablation="mean").manifest_options()
    assert beam["beam_width"] == 3 and beam["store_dtype"] == "torch.float16" and beam["ablation"] == "mean"
    assert SearchConfig(store_dtype="fp16").manifest_options(use_store=False)["store_dtype"] is None

    @dataclasses.dataclass(frozen=True)
    class Wider(SearchConfig):
        extra: int = dataclasses.field(default=0, metadata={"help": "a new option", "min": 0, "manifest": "if_set"})

    assert "extra" not in Wider().manifest_options() and Wider(extra=2).manifest_options()["extra"] == 2
