"""One ablated forward: only the ablation module writes to ``hook_z`` or masks a head's output.

Every module of ``cel_lens/`` is parsed. Outside the ablation modules (:data:`ABLATION_MODULES`)
the test fails, naming ``file:line``, on

* a hook on ``hook_z`` that modifies it: a ``(name, fn)`` pair or an ``add_hook(fn)`` call whose
  hook-point name mentions ``hook_z`` and whose function returns something other than nothing or
  its own ``z``, or writes into ``z`` in place (a hook that only reads ``z`` is fine);
* a head's output multiplied by a mask: ``*``, ``*=``, ``mul``/``mul_``, ``masked_fill`` or
  ``torch.where`` with an operand named like a head's output (``z``, ``head_out``, ...) and one
  named like a mask (``keep``, ``mask``, ``ablated``, ...).

Anything that ablates heads asks the ablation module instead (its hooks, ``replace``, or
``forward_resid(variants=...)``, which hands the stack the module's ``replace``).

The many-variant hooks are built in ``cel_lens/model/`` only (:data:`HOOK_BUILDERS`): evaluation,
scoring and the rest pass ``variants=`` (with ``repeated=True`` when their rows are already one
per variant) to ``forward_resid``/``forward_resid_cached``, so one forward applies every ablation.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cel_lens"
ABLATION_MODULES = {"cel_lens/model/ablation.py", "cel_lens/model/ablation_kinds.py"}
"""The modules that say what ablating a head does (the kinds and their hooks)."""

MODEL_PACKAGE = "cel_lens/model/"
HOOK_BUILDERS = {"variant_hooks", "head_hooks"}
"""Builders of ablation hooks that only ``cel_lens/model/`` calls (the public one-head-set
:func:`~cel_lens.model.ablation.ablation_hooks` and :func:`~cel_lens.model.ablation.ablate` stay
open to analyses that hook a model themselves)."""

HEAD_OUTPUT = re.compile(r"^(z|z_\w+|\w*head_outs?|\w*head_outputs?|per_head\w*|hook_z)$")
MASK = re.compile(r"(keep|mask|ablat)", re.IGNORECASE)


def _names(node: ast.AST) -> set[str]:
    """Every identifier and attribute name in ``node``."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _is_head_output(node: ast.AST) -> bool:
    return any(HEAD_OUTPUT.match(n) for n in _names(node))


def _is_mask(node: ast.AST) -> bool:
    return any(MASK.search(n) for n in _names(node))


def _names_hook_z(node: ast.AST) -> bool:
    """Whether an expression names a ``hook_z`` hook point (a string, an f-string, ``hook_z_name(...)``,
    an attribute ``.hook_z``)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "hook_z" in n.value:
            return True
        if isinstance(n, (ast.Name, ast.Attribute)) and (getattr(n, "id", None) or getattr(n, "attr", "")) in (
            "hook_z_name", "hook_z",
        ):
            return True
    return False


def _returns_value(fn: ast.AST) -> bool:
    """Whether a hook function (def or lambda) modifies the activation: it returns something other
    than ``None`` or its own first argument unchanged, or it writes into that argument in place
    (``z[...] = ...``, ``z.mul_(...)``)."""
    args = fn.args.posonlyargs + fn.args.args
    own = args[0].arg if args else None

    def replaces(value: Optional[ast.AST]) -> bool:
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return False
        return not (isinstance(value, ast.Name) and value.id == own)

    if isinstance(fn, ast.Lambda):
        return replaces(fn.body)
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and replaces(n.value):
            return True
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
        if any(isinstance(t, ast.Subscript) and own in _names(t.value) for t in targets):
            return True
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == own:
            return True
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_")
                and not n.func.attr.endswith("__") and own in _names(n.func.value)):
            return True
    return False


def _writing_hook(fn: ast.AST, defs: dict[str, ast.AST]) -> bool:
    """Whether ``fn`` (a lambda, or the name of a function defined in the module) modifies the
    activation; a function the module does not define counts as one that does."""
    if isinstance(fn, ast.Lambda):
        return _returns_value(fn)
    if isinstance(fn, ast.Name) and fn.id in defs:
        return _returns_value(defs[fn.id])
    return True


def _mask_product(node: ast.AST) -> Optional[str]:
    """What is wrong when ``node`` multiplies (or masks) a head's output by a mask, else None."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        pair = (node.left, node.right)
    elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
        pair = (node.target, node.value)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
        "mul", "mul_", "masked_fill", "masked_fill_", "where",
    ):
        parts = [node.func.value, *node.args]
        if node.func.attr == "where":  # torch.where(mask, a, b)
            parts = list(node.args)
        heads = [p for p in parts if _is_head_output(p)]
        masks = [p for p in parts if _is_mask(p) and p not in heads]
        return f"{node.func.attr} of a head's output with a mask" if heads and masks else None
    else:
        return None
    left, right = pair
    if (_is_head_output(left) and _is_mask(right)) or (_is_head_output(right) and _is_mask(left)):
        return "a head's output multiplied by a mask"
    return None


def side_routes(source: str, where: str) -> list[str]:
    """``file:line: what`` for every write to ``hook_z`` and every masked head output in ``source``,
    in line order."""
    tree = ast.parse(source)
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2 and _names_hook_z(node.elts[0]):
            if _writing_hook(node.elts[1], defs):
                found.append((node.lineno, "a hook that writes hook_z"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_hook":
            if _names_hook_z(node.func.value) and node.args and _writing_hook(node.args[0], defs):
                found.append((node.lineno, "a hook that writes hook_z"))
        problem = _mask_product(node)
        if problem:
            found.append((node.lineno, problem))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_only_the_ablation_module_writes_hook_z_or_masks_a_head():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in ABLATION_MODULES:
            problems += side_routes(path.read_text(encoding="utf-8"), rel)
    assert not problems, "ablate heads through cel_lens.model.ablation:\n" + "\n".join(problems)


def test_the_ablation_modules_exist():
    """The exempt files are the ablation modules (a rename must update :data:`ABLATION_MODULES`)."""
    for rel in ABLATION_MODULES:
        assert (ROOT / rel).is_file(), rel
    assert "def replace" in (ROOT / "cel_lens/model/ablation.py").read_text(encoding="utf-8")


def test_the_check_finds_each_side_route_and_spares_readers():
    """The checker fails on each form it is meant to catch (with its line) and passes readers."""
    found = side_routes(
        "def answer(head_out, keep):\n"
        "    head_out = head_out * keep[:, None, :, None].to(head_out.dtype)\n"
        "    return head_out\n"
        "def zero(z, hook=None):\n"
        "    return z * 0\n"
        "hooks = [(f'blocks.{l}.attn.hook_z', zero) for l in range(3)]\n"
        "model.blocks[0].attn.hook_z.add_hook(lambda z, hook: z * 0)\n"
        "other = [(hook_z_name(1), lambda z, hook: z.clone())]\n"
        "z *= ablated\n"
        "y = torch.where(mask, 0.0, z)\n"
        "w = z.masked_fill(~keep, 0)\n"
        "def inplace(z, hook):\n"
        "    z[:, :, 0] = 0\n"
        "    return z\n"
        "more = [(hook_z_name(0), inplace)]\n"
        "def scaled(z, hook):\n"
        "    z.mul_(0.5)\n"
        "more += [(hook_z_name(0), scaled)]\n",
        "x.py",
    )
    assert [f.split(":")[1] for f in found] == ["2", "6", "7", "8", "9", "10", "11", "15", "18"], found
    assert all(f.startswith("x.py:") for f in found)
    readers = (
        "def grab(z, hook=None):\n"
        "    sink[hook.name] = z.detach()\n"
        "hooks = [(hook_z_name(l), grab) for l in range(3)]\n"
        "def keep_graph(z, hook):\n"
        "    saved[0] = z\n"
        "    return z\n"
        "hooks += [(hook_z_name(0), keep_graph)]\n"
        "scores = scores * causal\n"
        "out = spec.hook_z(z)\n"
        "n = only_ablated * only_intact\n"
    )
    assert side_routes(readers, "y.py") == []


def hook_builder_calls(source: str, where: str) -> list[str]:
    """``file:line: what`` for every call or import of a :data:`HOOK_BUILDERS` name in ``source``
    (``variant_hooks(...)``, ``ablation.variant_hooks(...)``, ``from ... import variant_hooks``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            if name in HOOK_BUILDERS:
                found.append((node.lineno, f"calls {name}"))
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in HOOK_BUILDERS:
                    found.append((node.lineno, f"imports {alias.name}"))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_only_the_model_package_builds_variant_hooks():
    """Generation, teacher-forced scoring and every other caller route ablations through
    ``forward_resid(variants=...)``: none builds the ablation's hooks itself."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(MODEL_PACKAGE):
            problems += hook_builder_calls(path.read_text(encoding="utf-8"), rel)
    assert not problems, "pass variants= to cel_lens.model.forward instead:\n" + "\n".join(problems)


def test_the_builder_check_finds_calls_and_imports():
    found = hook_builder_calls(
        "from cel_lens.model.ablation import ZERO, variant_hooks\n"
        "hooks = variant_hooks(masks, 1, ZERO)\n"
        "more = ZERO.variant_hooks(masks, 2)\n"
        "one = kind.head_hooks(heads)\n"
        "fine = forward_resid(model, x, variants=masks, ablation=ZERO, repeated=True)\n"
        "also_fine = ablation_hooks(heads, n_heads=4)\n",
        "x.py",
    )
    assert found == [
        "x.py:1: imports variant_hooks", "x.py:2: calls variant_hooks", "x.py:3: calls variant_hooks",
        "x.py:4: calls head_hooks",
    ], found
