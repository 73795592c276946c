"""The model organism: tokenizer, tasks, the training forward against HookedTransformer, the shipped
weights' beneficial head (through the same evaluator real models use), ground truth from weights and
activations, the search selecting it, the CLI, and retraining from the shipped seed."""

from __future__ import annotations

import json

import pytest
import torch

from cel_lens.heads import HeadSet
from cel_lens.organism import (
    ORGANISM_DIR,
    ORGANISM_TASK,
    SIDE_TASK,
    OrganismConfig,
    ground_truth_heads,
    head_feature_coefficients,
    load_organism,
    load_tokenizer,
    ov_feature_reading,
    prompt_text,
    sample_prompts,
)
from cel_lens.tasks import load_task
from cel_lens.tasks.organism import BOS, EQ, POS, SKIP, U_MINUS, U_PLUS, V_MINUS


@pytest.fixture(scope="module")
def organism():
    return load_organism()


@pytest.fixture(scope="module")
def shipped_meta() -> dict:
    return json.loads((ORGANISM_DIR / "config.json").read_text())


def _counts(prompt: str) -> tuple[int, int]:
    words = prompt.split()
    return words.count("u+") - words.count("u-"), words.count("v+") - words.count("v-")


# -- tokenizer and tasks ------------------------------------------------------------------------------
def test_tokenizer_reads_one_token_per_word(organism):
    from cel_lens.evaluation import encode_pair

    tok = load_tokenizer()
    assert tok("u+ u- v- =", add_special_tokens=False)["input_ids"] == [U_PLUS, U_MINUS, V_MINUS, EQ]
    assert tok(" pos", add_special_tokens=False)["input_ids"] == [POS]
    assert tok.decode([U_PLUS, V_MINUS, SKIP]) == "u+ v- skip"
    ctx, cont = encode_pair(organism, "u+ u- v- =", " skip")
    assert ctx == [BOS, U_PLUS, U_MINUS, V_MINUS, EQ] and cont == [SKIP]


def test_tasks_follow_their_rules_and_are_disjoint_and_deterministic():
    a = load_task(ORGANISM_TASK, n_dist=300, n_test=200, seed=3)
    b = load_task(SIDE_TASK, n_dist=300, n_test=200, seed=3)
    again = load_task(ORGANISM_TASK, n_dist=300, n_test=200, seed=3)
    other = load_task(ORGANISM_TASK, n_dist=300, n_test=200, seed=4)
    assert (a.answer_type, len(a.dist), len(a.test)) == ("exact_match", 300, 200)
    assert [(e.id, e.prompt, e.target) for e in [*a.dist, *a.test]] == [(e.id, e.prompt, e.target) for e in [*again.dist, *again.test]]
    assert not {e.content_hash for e in a.dist} & {e.content_hash for e in a.test}
    assert {e.prompt for e in a.test} != {e.prompt for e in other.test}
    n_skip = 0
    for ea, eb in zip([*a.dist, *a.test], [*b.dist, *b.test]):
        assert ea.prompt == eb.prompt  # same inputs for both tasks: no task cue
        words = ea.prompt.split()
        assert len(words) == 11 and words[-1] == "=" and sum(w in ("u+", "u-") for w in words) == 5
        x_u, x_v = _counts(ea.prompt)
        assert ea.target == (" pos" if x_v > 0 else " neg")
        assert eb.target == (" skip" if x_u >= 3 else ea.target)
        n_skip += eb.target == " skip"
    assert 0.12 < n_skip / 500 < 0.26  # P(x_u >= 3) = 6/32


def test_task_defaults_and_options():
    a = load_task(ORGANISM_TASK)
    assert len(a.dist) == 2000 and len(a.test) == 2000
    with pytest.raises(ValueError, match="unknown option"):
        load_task(ORGANISM_TASK, n_dist=10, n_test=10, chat_template=True)


# -- the training forward is HookedTransformer's forward ------------------------------------------------
def test_fused_forward_matches_hooked_transformer(organism):
    from cel_lens.model import ablate
    from cel_lens.organism import answer_logits, model_parameters

    batch = sample_prompts(96, torch.Generator().manual_seed(7))
    tokens = organism.to_tokens([prompt_text(r) for r in batch.tokens])
    assert torch.equal(tokens, batch.tokens)
    params = model_parameters([organism])
    with torch.no_grad():
        ref = organism(tokens)[:, -1]
        assert torch.allclose(answer_logits(params, tokens[None])[0], ref, atol=1e-4)
        for h in range(organism.cfg.n_heads):
            with ablate(organism, f"L0H{h}"):
                ref_h = organism(tokens)[:, -1]
            keep = torch.ones(1, organism.cfg.n_heads, dtype=torch.bool)
            keep[0, h] = False
            assert torch.allclose(answer_logits(params, tokens[None], keep)[0], ref_h, atol=1e-4)


def test_a_seed_trains_the_same_alone_or_in_a_stack():
    from cel_lens.organism import model_parameters, train_organisms

    cfg = OrganismConfig(steps=40, batch_size=64)
    (alone, log_alone), = train_organisms([5], cfg, log_every=20)
    stacked = train_organisms([4, 5], cfg, log_every=20)
    p_alone, p_stacked = model_parameters([alone]), model_parameters([stacked[1][0]])
    for name in p_alone:
        assert torch.allclose(p_alone[name], p_stacked[name], atol=1e-5), name
    assert not torch.allclose(model_parameters([stacked[0][0]])["embed.W_E"], p_alone["embed.W_E"])
    assert log_alone.step == [0, 20, 40] and len(log_alone.shared_coef[0]) == cfg.n_heads


# -- the shipped organism -------------------------------------------------------------------------------
def test_shipped_files_are_small_and_complete(shipped_meta):
    files = {p.name for p in ORGANISM_DIR.rglob("*") if p.is_file()}
    assert {"model.safetensors", "config.json", "training_log.json", "tokenizer.json"} <= files
    assert sum(p.stat().st_size for p in ORGANISM_DIR.rglob("*") if p.is_file()) < 1_000_000
    assert shipped_meta["tasks"] == {"organism": ORGANISM_TASK, "side": SIDE_TASK}


def test_shipped_organism_has_a_beneficial_head(organism):
    """Through cel_lens.evaluate, as for real models: ablating the ground-truth head raises task A's
    held-out accuracy (paired CI above zero) and lowers task B's by about as much."""
    from cel_lens.evaluation import evaluate
    from cel_lens.stats import paired_bootstrap_ci

    head = ground_truth_heads(organism)
    task_a = load_task(ORGANISM_TASK, n_dist=0, n_test=600, seed=11)
    task_b = load_task(SIDE_TASK, n_dist=0, n_test=600, seed=11)
    ra = evaluate(organism, task_a.test, [HeadSet(), head], progress=False)
    rb = evaluate(organism, task_b.test, [HeadSet(), head], progress=False)
    acc_a, acc_b = ra.accuracy.tolist(), rb.accuracy.tolist()
    assert 0.75 < acc_a[0] < 0.92 and acc_b[0] > 0.9  # the compromise: skip where task B says so
    lo, hi = paired_bootstrap_ci(ra.correct[0], ra.correct[1], seed=0)
    assert acc_a[1] - acc_a[0] > 0.08 and lo > 0
    assert acc_b[1] - acc_b[0] < -0.08 and paired_bootstrap_ci(rb.correct[0], rb.correct[1], seed=0)[1] < 0
    # the intact model's task-A errors are the conflict: prompts where task B answers "skip"
    wrong = [e for e, ok in zip(task_a.test, ra.correct[0].tolist()) if not ok]
    assert wrong and all(e.meta["x_u"] >= 3 for e in wrong)


def test_fused_evaluation_agrees_with_the_evaluator(organism):
    from cel_lens.evaluation import evaluate
    from cel_lens.organism import encode_prompts, model_parameters
    from cel_lens.organism.sweep import _ablation_correct

    task = load_task(ORGANISM_TASK, n_dist=0, n_test=300, seed=2)
    sets = [HeadSet()] + [HeadSet([(0, h)]) for h in range(organism.cfg.n_heads)]
    ref = evaluate(organism, task.test, sets, progress=False).correct
    labels = torch.tensor([load_tokenizer()(e.target, add_special_tokens=False)["input_ids"][0] for e in task.test])
    with torch.no_grad():
        fused = _ablation_correct(model_parameters([organism]), encode_prompts([e.prompt for e in task.test]), labels,
                                  organism.cfg.n_heads)[0]
    assert torch.equal(fused, ref.bool())


def test_ground_truth_from_attribution_and_weights(organism):
    coef = head_feature_coefficients(organism)
    (gt,) = ground_truth_heads(coefficients=coef).heads
    h = gt.head
    # the ground-truth head writes most of the u -> skip signal and little of the v -> pos/neg signal
    assert coef.shared_share[h] > 0.5 and coef.task_share[h] < 0.2
    assert coef.conflict[h] > 0 and all(coef.conflict[g] < 0 for g in range(organism.cfg.n_heads) if g != h)
    # weights only (OV circuit, no prompts): the same head reads u+ - u- onto skip the most
    ov = ov_feature_reading(organism)
    assert int(ov["shared"].argmax()) == h and int(ov["task"].argmax()) != h
    # an independent computation of the attributions (the fused forward) gives the same numbers
    from cel_lens.organism import fit_feature_coefficients
    from cel_lens.organism import answer_head_outputs, model_parameters

    batch = sample_prompts(4096, torch.Generator().manual_seed(12345))
    with torch.no_grad():
        head_out, _ = answer_head_outputs(model_parameters([organism]), batch.tokens[None])
    fused = fit_feature_coefficients(head_out[0], organism.W_U, batch)
    assert torch.allclose(fused.conflict, coef.conflict, atol=1e-3)
    assert torch.allclose(fused.shared, coef.shared, atol=1e-3)


def test_search_selects_the_ground_truth_head(organism, tmp_path):
    import cel_lens

    task = load_task(ORGANISM_TASK, n_dist=400, n_test=400, seed=5)
    run = cel_lens.search(organism, task, out=tmp_path / "run", n_null=10, n_boot=1000, progress=False)
    res = run.result
    assert set(ground_truth_heads(organism).heads) <= set(res.head_set.heads)
    assert res.gain > 0.05 and res.ci_low > 0


# -- command line and figures ------------------------------------------------------------------------
def test_cli_info_and_train(tmp_path, capsys):
    from cel_lens.cli import main

    assert main(["organism", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ground_truth_heads"] == str(ground_truth_heads())
    assert info["test"]["beneficial"] and info["total_bytes"] < 1_000_000
    assert info["test"]["best_head"] == ground_truth_heads().heads[0].head
    from cel_lens.organism import plot_head_effects

    assert len(plot_head_effects(info).data) == 5
    out = tmp_path / "org"
    code = main(["organism", "train", "--seed", "3", "--out", str(out), "--set", "steps=20", "--set", "batch_size=32",
                 "--no-figure", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["seed"] == 3 and summary["organism"]["steps"] == 20
    model = load_organism(path=out)
    assert model.cfg.n_heads == 4 and (out / "training_log.json").is_file()
    assert main(["organism", "train", "--out", str(out), "--set", "heads=3"]) == 2
    assert capsys.readouterr().err.startswith("cel-lens: error: bad override")


def test_training_figure_and_seed_parsing(tmp_path):
    from cel_lens.organism import parse_seeds, plot_emergence, plot_training_log

    log = json.loads((ORGANISM_DIR / "training_log.json").read_text())
    fig = plot_training_log(log)
    assert len(fig.data) == 5 + 2 * len(log["shared_coef"][0])
    fig.write_html(str(tmp_path / "f.html"), include_plotlyjs=False)
    rows = [{"label": "a", "beneficial": 3, "strong": 2, "seeds": 4}, {"label": "b", "beneficial": 0, "strong": 0, "seeds": 4}]
    assert [len(t.y) for t in plot_emergence(rows).data] == [2, 2]
    assert parse_seeds("0-3,9") == [0, 1, 2, 3, 9]
    with pytest.raises(ValueError):
        parse_seeds("a-b")


# -- retraining reproduces the shipped organism ---------------------------------------------------------------
@pytest.mark.slow
def test_retraining_the_shipped_seed_reproduces_it(organism, shipped_meta):
    from cel_lens.organism import evaluate_models, train_organism

    config = OrganismConfig.from_dict(shipped_meta["organism"])
    model, log = train_organism(shipped_meta["seed"], config)
    assert ground_truth_heads(model) == ground_truth_heads(organism)
    shipped, again = evaluate_models([organism, model], config, n_test=1000, n_boot=500)
    assert again.beneficial and again.best_head == shipped.best_head
    assert abs(again.acc_a - shipped.acc_a) < 0.01 and abs(again.acc_b - shipped.acc_b) < 0.01
    assert max(abs(x - y) for x, y in zip(again.gain_a, shipped.gain_a)) < 0.02


def test_the_organism_package_imports_its_modules_on_first_use():
    """``cl.organism.load_organism()`` took 2.0 s against 0.18 s for ``cl.load_model("organism")``: importing
    the package loaded its training, sweep and figure modules too. Its ``__init__`` now imports no
    module of its own at the top (checked on the source, so it is fast); each public name resolves."""
    import ast
    from pathlib import Path

    import cel_lens.organism as package

    tree = ast.parse(Path(package.__file__).read_text())
    eager = [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("cel_lens")]
    assert eager == []
    assert all(getattr(package, name) is not None for name in package.__all__)
    assert package.load_organism.__module__ == "cel_lens.organism.model"


@pytest.mark.slow
def test_load_organism_loads_only_what_the_model_needs():
    """The same in a fresh process: ``cl.organism.load_organism()`` leaves plotly and the training, sweep and
    figure modules unimported (a subprocess: about 15 s on a busy two-core machine)."""
    import subprocess
    import sys

    code = (
        "import sys, cel_lens as cl; m = cl.organism.load_organism(); "
        "print(m.organism_config is not None, sorted(k for k in ('plotly', 'cel_lens.organism.figures', "
        "'cel_lens.organism.train', 'cel_lens.organism.sweep') if k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "True []"


def test_emergence_reference_labels_sit_above_the_bars():
    """``figures/organism_emergence.png`` had a reference line's label drawn over the last bar."""
    from cel_lens.organism import plot_emergence

    rows = [dict(label=f"design {i}", beneficial=i, seeds=9, strong=i // 2) for i in range(4)]
    notes = [a for a in plot_emergence(rows).layout.annotations if "4/9" in a.text or "2/9" in a.text]
    assert len(notes) == 2 and all(a.yref == "paper" and a.y == 1.0 and a.yanchor == "bottom" for a in notes)
