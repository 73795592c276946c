"""Distributed head scans on Ray (cel_lens.distributed).

Without Ray: shards re-form the local backend's batches, so evaluating the shards in-process and
scattering the parts back gives the local results bit for bit (every task kind), and asking for the
Ray backend without Ray installed is one clear error line.

With Ray (one local instance with 2 CPUs for the module, two actors, a tiny model): a search gives
the local backend's result and run records; actors killed mid-scan (``ray.kill`` and SIGKILL of the
process) are restarted and their shards resubmitted, with no evaluation lost or recorded twice; a
search interrupted on the driver resumes, on Ray, to the same result.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections import Counter

import pytest
import torch

from cel_lens.backends.ray import (
    RAY_INSTALL_HINT,
    ModelFactory,
    RayOracle,
    RayUnavailableError,
    ShardWorker,
    plan_shards,
    require_ray,
    shard_split,
)
from cel_lens.config import ABLATION_KINDS
from cel_lens.evaluation import encode_split
from cel_lens.heads import Head, HeadSet
from cel_lens.backends import LocalOracle as ModelOracle
from cel_lens.backends.ray.shards import _balanced_bounds
from cel_lens.pipeline import search
from cel_lens.runs import RunDir
from cel_lens.tasks import Example, Task

WORDS = "the river runs through city man walks to store woman holds a guitar she plays sky blue water boil".split()
SEARCH = dict(k=2, pool_size=4, n_null=4, n_boot=200, batch_size=4, seed=0, progress=False)
SINGLES = [HeadSet()] + [HeadSet([Head(layer, head)]) for layer in range(3) for head in range(4)]


def _prompt(rng: random.Random) -> str:
    return "Question: " + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(2, 12))) + "?\nAnswer:"


def _mc_task(n_dist: int = 24, n_test: int = 16, seed: int = 5) -> Task:
    """Multiple choice with short answers of different lengths: the tiny random model's choices
    move when single heads are ablated."""
    rng = random.Random(seed)
    choices = (" yes", " no", " 1", " 2")

    def make(i: int, tag: str) -> Example:
        return Example(f"{tag}/{i}", _prompt(rng), choices=choices, label=rng.randrange(len(choices)))

    return Task(
        "toy_mc", "multiple_choice", tuple(make(i, "d") for i in range(n_dist)),
        tuple(make(i, "t") for i in range(n_test)), metric="acc",
    )


def _exact_task(model, n: int = 18, seed: int = 6) -> Task:
    """Exact match whose targets are the intact model's own greedy token for two thirds of the
    examples (ablations break some) and a fixed token otherwise."""
    rng = random.Random(seed)
    examples = []
    for i in range(n):
        prompt = _prompt(rng)
        ids = [model.tokenizer.bos_token_id] + model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            greedy = int(model(torch.tensor([ids]))[0, -1].argmax())
        target = model.tokenizer.decode([greedy]) if i % 3 else " yes"
        examples.append(Example(f"e/{i}", prompt, target=target or " yes"))
    return Task("toy_exact", "exact_match", tuple(examples[: n // 2]), tuple(examples[n // 2 :]))


def _judge(ex: Example, completion: str) -> bool:
    return len(completion) % 2 == 0


def _generation_task(n: int = 10, seed: int = 7) -> Task:
    """Generation stopped at the first vowel, space or digit (so the tiny model stops at once),
    judged by the completion's length."""
    rng = random.Random(seed)
    stop = tuple(" aeiou0123456789\n")
    examples = tuple(Example(f"g/{i}", _prompt(rng), meta={"stop": stop}) for i in range(n))
    return Task(
        "toy_gen", "generation", examples[: n // 2], examples[n // 2 :], metric="pass@1", judge=_judge,
        options={"max_new_tokens": 256},
    )


# ---------------------------------------------------------------------------------------------
# without Ray
# ---------------------------------------------------------------------------------------------
def test_balanced_bounds_by_hand():
    assert _balanced_bounds([1, 1, 1, 1], 2) == [0, 2, 4]
    assert _balanced_bounds([6, 1, 1, 1, 1, 1, 1], 2) == [0, 1, 7]  # the heavy first batch alone
    assert _balanced_bounds([5, 5, 5], 3) == [0, 1, 2, 3]
    assert _balanced_bounds([5, 5], 4) == [0, 1, 2]  # never more shards than batches
    assert _balanced_bounds([3, 0, 0, 3], 2) == [0, 1, 4] or _balanced_bounds([3, 0, 0, 3], 2)[1] in (1, 2, 3)
    for costs in ([9, 7, 5, 3, 2, 2, 1], [1] * 11, [4, 4, 1]):
        for n in range(1, 6):
            b = _balanced_bounds(costs, n)
            assert b[0] == 0 and b[-1] == len(costs) and all(x < y for x, y in zip(b, b[1:]))
            assert len(b) - 1 == min(n, len(costs))


@pytest.fixture(scope="module")
def worker():
    """An in-process ShardWorker (no Ray) over a tiny model; its task is swapped per test."""
    return ShardWorker(ModelFactory.tiny(), _mc_task(), batch_size=4)


def _scatter(w: ShardWorker, split: str, n_shards: int, sets, budget=None) -> torch.Tensor:
    shards = w.plan(split, n_shards, budget)
    n = len(w.task.split(split))
    assert sorted(i for s in shards for i in s.examples) == list(range(n))
    out = torch.zeros(len(sets), n, dtype=torch.bool)
    for s in shards:
        out[:, list(s.examples)] = torch.from_numpy(w.evaluate(s, [str(x) for x in sets]))
    return out


@pytest.mark.parametrize("answer_type", ["multiple_choice", "exact_match", "generation"])
def test_shards_reproduce_the_local_evaluation(worker, answer_type):
    model = worker.model
    make = {"multiple_choice": _mc_task, "exact_match": lambda: _exact_task(model), "generation": _generation_task}
    task = make[answer_type]()
    worker.task, worker._stores = task, {}
    worker.use_store = answer_type != "generation"
    sets = SINGLES if answer_type != "generation" else SINGLES[:7]
    ref = ModelOracle(model, task, batch_size=4, progress=False).evaluate("dist", sets)
    assert len({tuple(r.tolist()) for r in ref}) > 1, "the ablations should change some answers"
    assert torch.equal(_scatter(worker, "dist", 3, sets), ref)  # (2 shards: the Ray tests)


def test_shards_keep_the_local_store_layers(worker):
    """With a byte budget the local store keeps a subset of layers; each shard keeps the same ones
    (not the more that would fit its smaller share), and the results stay the local ones."""
    model = worker.model
    task = _mc_task()
    worker.task, worker._stores, worker.use_store = task, {}, True
    per_layer = 4 * sum(
        torch.Size(s).numel() for b in encode_split(model, task.dist, 4) for s in b.part_shapes(model.cfg.d_model)
    )
    budget = per_layer + per_layer // 2  # one of the two resumable layers fits
    sets = SINGLES[::2]  # heads of every layer, fewer passes
    local = ModelOracle(model, task, batch_size=4, store_budget=budget, progress=False)
    ref = local.evaluate("dist", sets)
    shards = worker.plan("dist", 2, budget)
    assert all(s.layers == local.store("dist").stored_layers for s in shards)
    assert len(shards[0].layers) == 1
    assert torch.equal(_scatter(worker, "dist", 2, sets, budget), ref)
    sub = shard_split(task.dist, shards[1])
    assert [e.id for e in sub] == [task.dist[i].id for i in shards[1].examples]


def test_plan_balances_tokens_and_orders_longest_first(worker):
    task = _mc_task(n_dist=40)
    worker.task = task
    batches = encode_split(worker.model, task.dist, 4)
    shards = plan_shards(worker.model, task.dist, 3, batch_size=4)
    assert [i for s in shards for i in s.examples] == [i for b in batches for i in b.example_index.tolist()]
    ends = {sum(b.n_examples for b in batches[: k + 1]) for k in range(len(batches))}
    assert all(sum(len(t) for t in shards[: k + 1]) in ends for k in range(len(shards)))  # cut at batch boundaries
    cost = lambda s: sum(  # noqa: E731
        b.rows.tokens.numel() if b.rows is not None else b.context_tokens.numel() + b.cont_tokens.numel()
        for b in encode_split(worker.model, shard_split(task.dist, s), 4)
    )
    costs = [cost(s) for s in shards]
    assert max(costs) <= 1.5 * sum(costs) / len(costs)


def test_model_factory_recipes():
    assert ModelFactory.load("some/model", loader="hooked") == ModelFactory("load_model", "some/model", (("loader", "hooked"),))
    assert ModelFactory.tiny(seed=1).options == (("seed", 1),)
    with pytest.raises(ValueError, match="unknown model factory kind"):
        ModelFactory("pickle")


# ---------------------------------------------------------------------------------------------
# without Ray installed
# ---------------------------------------------------------------------------------------------
def test_without_ray_one_clear_error(monkeypatch, capsys):
    from cel_lens.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if not installed
    with pytest.raises(RayUnavailableError, match="pip install"):
        require_ray()
    with pytest.raises(ImportError, match='cel_lens\\[ray\\]'):  # before any model is loaded
        search("no-such/model-anywhere", _mc_task(), backend="ray")
    code = main(["search", "--model", "no-such/model-anywhere", "--task", "arithmetic", "--backend", "ray"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("cel-lens: error:") and RAY_INSTALL_HINT in err[0]
    with pytest.raises(ValueError, match="unknown backend"):
        search("no-such/model-anywhere", _mc_task(), backend="spark")


def test_a_model_named_for_ray_loads_in_each_actor_with_the_settings(monkeypatch):
    """A name goes to the actors as a recipe carrying the loader and BOS rule (before: the actors
    loaded it with the defaults, whatever --loader said); the organism and objects pass as they are."""
    pytest.importorskip("ray")
    import cel_lens.backends.ray as ray_backend
    from cel_lens.config import ExecutionSettings

    seen = []
    monkeypatch.setattr(ray_backend, "RayOracle", lambda model, task, **kw: seen.append(model))
    backend = ray_backend.RayBackend()
    backend.open("ckpt/", None, ExecutionSettings(loader="hooked", bos="always"))
    backend.open("ckpt/", None, ExecutionSettings())
    backend.open("organism", None, ExecutionSettings(loader="hooked"))
    assert seen[0] == ModelFactory.load("ckpt/", loader="hooked", bos="always")
    assert seen[1] == ModelFactory.load("ckpt/") and seen[2] == "organism"


def test_cli_search_ray_options():
    from cel_lens.cli import build_parser

    args = build_parser().parse_args(
        ["search", "--model", "m", "--task", "arithmetic", "--backend", "ray", "--address", "auto",
         "--workers", "4", "--gpus-per-worker", "0.5"]
    )
    assert (args.backend, args.ray_address, args.workers, args.gpus_per_worker) == ("ray", "auto", 4, 0.5)
    assert build_parser().parse_args(["search", "--model", "m", "--task", "t"]).backend == "local"


# ---------------------------------------------------------------------------------------------
# with Ray
# ---------------------------------------------------------------------------------------------
def test_a_worker_in_bf16_makes_float32_decisions_and_counts_its_recomputes(worker):
    model = worker.model
    task = _exact_task(model)
    ref = ModelOracle(model, task, batch_size=4, progress=False).evaluate("dist", SINGLES)
    bf16 = ShardWorker(ModelFactory.tiny(), task, batch_size=4, precision="bf16")
    assert torch.equal(_scatter(bf16, "dist", 2, SINGLES), ref)
    record = bf16.precision_record("exact_match")
    assert record["compute"] == "bf16" and record["recomputed"]["dist"]["decisions"] == ref.numel()
    bf16.set_precision("float32")  # a fresh tally in the new precision
    assert bf16.precision_record("exact_match") == {"compute": "float32", "recomputed": {}}


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance (2 CPUs, no dashboard) for the whole module."""
    try:
        import ray
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"Ray is not installed; CI installs the ray extra ({RAY_INSTALL_HINT})")
        pytest.skip(f"Ray is not installed ({RAY_INSTALL_HINT})")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_object():
    """The model the actors build from ``ModelFactory.tiny()``, built here."""
    return ModelFactory.tiny().build()


@pytest.fixture(scope="module")
def local_run(tiny_object, tmp_path_factory):
    """The reference: the same search on the local backend."""
    return search(tiny_object, _mc_task(), out=tmp_path_factory.mktemp("local") / "run", **SEARCH)


def _records(path) -> list[tuple[str, str, bytes]]:
    return sorted((e.split, str(e.heads), e.correct.numpy().tobytes()) for e in RunDir(path).evaluations())


def _same_as_local(run, local_run) -> None:
    got, ref = run.result.to_dict(), local_run.result.to_dict()
    got.pop("timings"), ref.pop("timings")
    # the ablation-kind controls need the model in this process: the local run has them, Ray's not
    assert got.pop("ablation_controls") is None and set(ref.pop("ablation_controls")) == set(ABLATION_KINDS) - {"zero"}
    assert got == ref
    # same model (hashed by an actor), same splits and options; each precision record is its own
    # processes' tally (the local run also evaluated the ablation-kind controls), in the same precision
    ray_precision, local_precision = run.manifest["precision"], local_run.manifest["precision"]
    assert ray_precision["replicas"] >= 1 and ray_precision["compute"] == local_precision["compute"]
    assert ray_precision["option"] == local_precision["option"]  # (a killed replica's tally goes with it)
    strip = lambda m: {k: v for k, v in m.items() if k != "precision"}  # noqa: E731
    assert strip(run.manifest) == strip(local_run.manifest)
    records = _records(run.path)
    keys = [(s, h) for s, h, _ in records]
    assert len(keys) == len(set(keys)), [k for k, c in Counter(keys).items() if c > 1]
    assert records == _records(local_run.path)


def test_ray_search_equals_local(ray_cluster, local_run, tmp_path):
    assert local_run.result.subsets and len({s["dist_acc"] for s in local_run.result.subsets}) > 1
    run = search(ModelFactory.tiny(), _mc_task(), out=tmp_path / "run", backend="ray", workers=2, **SEARCH)
    oracle = run.oracle.oracle
    assert isinstance(oracle, RayOracle) and oracle.workers == 2
    assert len(oracle.plan("dist")) == 2 and oracle.failures == 0
    assert len({info["pid"] for info in oracle.worker_info}) == 2
    assert run.manifest["precision"]["replicas"] == 2 and run.manifest["precision"]["recomputed"]["dist"]["decisions"] > 0
    _same_as_local(run, local_run)


@pytest.mark.slow
def test_killed_workers_are_restarted_and_their_shards_rerun(ray_cluster, local_run, tmp_path, monkeypatch):
    """``ray.kill`` of actor 0 while it holds a stage-1 shard and SIGKILL of actor 1's process while
    it holds a test-split shard (Ray restarts both), then ``ray.kill(no_restart=True)`` of actor 0
    in the next call (dead for good: replaced by a new actor). Every shard is resubmitted, and the
    run matches the local one with every evaluation recorded once."""
    kills: list[str] = []
    submit = RayOracle._submit

    def killing_submit(self, slot, method, args):
        ref = submit(self, slot, method, args)
        if method == "evaluate_choices":  # the actor call every evaluation makes (choice scores too)
            shard, n_sets = args[0], len(ray_cluster.get(args[1]))
            if slot == 0 and shard.split == "dist" and n_sets == 12 and "ray.kill" not in kills:
                kills.append("ray.kill")
                ray_cluster.kill(self.actor(0), no_restart=False)
            elif slot == 1 and shard.split == "test" and "SIGKILL" not in kills:
                kills.append("SIGKILL")
                os.kill(self.worker_info[1]["pid"], signal.SIGKILL)
            elif slot == 0 and shard.split == "test" and "SIGKILL" in kills and "no_restart" not in kills:
                kills.append("no_restart")
                ray_cluster.kill(self.actor(0), no_restart=True)
        return ref

    monkeypatch.setattr(RayOracle, "_submit", killing_submit)
    run = search(ModelFactory.tiny(), _mc_task(), out=tmp_path / "run", backend="ray", workers=2, **SEARCH)
    oracle = run.oracle.oracle
    assert kills == ["ray.kill", "SIGKILL", "no_restart"]
    assert (oracle.failures, oracle.resubmissions, oracle.replaced) == (3, 3, 1)
    _same_as_local(run, local_run)


@pytest.mark.slow
def test_interrupted_ray_search_resumes(ray_cluster, local_run, tiny_object, tmp_path, monkeypatch):
    """The driver dies after three evaluation calls; the same search again, now on one worker (so
    with other shards) and given the model object (shipped to the actor through Ray's object
    store), evaluates only what is missing and reaches the local result."""
    evaluate_ = RayOracle.evaluate_choices  # what a search calls (correctness and choice scores)

    def dying_evaluate(self, split, head_sets, **kwargs):
        if self.calls == 3:
            raise KeyboardInterrupt("driver killed")
        return evaluate_(self, split, head_sets, **kwargs)

    monkeypatch.setattr(RayOracle, "evaluate_choices", dying_evaluate)
    with pytest.raises(KeyboardInterrupt):
        search(ModelFactory.tiny(), _mc_task(), out=tmp_path / "run", backend="ray", workers=2, **SEARCH)
    before = len(RunDir(tmp_path / "run").evaluations())
    assert 0 < before < len(_records(local_run.path))
    monkeypatch.setattr(RayOracle, "evaluate_choices", evaluate_)
    run = search(tiny_object, _mc_task(), out=tmp_path / "run", backend="ray", workers=1, **SEARCH)
    assert run.oracle.hits >= before and run.oracle.misses == len(_records(local_run.path)) - before
    _same_as_local(run, local_run)
