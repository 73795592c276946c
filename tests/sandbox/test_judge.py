"""The verdict protocol's parts that run without a sandbox: splitting a test into holes and a
remainder, and the plain-data codec (exact built-in types out, hostile input refused)."""

from __future__ import annotations

import collections
import enum
import math

import pytest

from cel_lens.sandbox import codec
from cel_lens.sandbox.judge import HOLE, TRUSTED_MODULES, CannotJudge, split_test, split_tests


# ---------------------------------------------------------------------------------------------
# holes and remainders
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "test, remainder, holes",
    [
        ("assert f(1)==2", f"{HOLE}(0) == 2", ("f(1)",)),
        ("assert abs(area(2) - 12.56) < 0.01", f"abs({HOLE}(0) - 12.56) < 0.01", ("area(2)",)),
        ("assert int(lobb_num(5, 3)) == 35", f"int({HOLE}(0)) == 35", ("lobb_num(5, 3)",)),
        ("assert math.isclose(f(x), 1.0, rel_tol=0.1)", f"math.isclose({HOLE}(0), 1.0, rel_tol=0.1)", ("f(x)",)),
        ("assert f(x)[0] == set([1, 2])", f"{HOLE}(0)[0] == set([1, 2])", ("f(x)",)),
        ("assert (max_height(root)) == 3", f"{HOLE}(0) == 3", ("max_height(root)",)),
        ("assert f(1).strip() == 'a'", f"{HOLE}(0).strip() == 'a'", ("f(1)",)),
        ("assert f(1) == g(2) or not h()", f"{HOLE}(0) == {HOLE}(1) or not {HOLE}(2)", ("f(1)", "g(2)", "h()")),
        ("assert all(x % 2 == 0 for x in f(1))", f"all((x % 2 == 0 for x in {HOLE}(0)))", ("f(1)",)),
        ("assert all(f(1) > x for x in range(3))", f"all(({HOLE}(0) > x for x in range(3)))", ("f(1)",)),
        ("assert sorted(f(1), key=lambda t: t[1]) == []", f"sorted({HOLE}(0), key=lambda t: t[1]) == []", ("f(1)",)),
        ("assert tuple_size(t) == sys.getsizeof(t)", f"{HOLE}(0) == sys.getsizeof({HOLE}(1))", ("tuple_size(t)", "t")),
        ("assert f(g(1), [h(i) for i in range(2)]) == 1", f"{HOLE}(0) == 1", ("f(g(1), [h(i) for i in range(2)])",)),
        ("assert f(1).count(2) == 1", f"{HOLE}(0).count(2) == 1", ("f(1)",)),
        ("assert sorted([3, 1]) == [1, 3]", "sorted([3, 1]) == [1, 3]", ()),
        ("assert f(1) == 2, 'a message'", f"{HOLE}(0) == 2", ("f(1)",)),
    ],
)
def test_split_keeps_the_program_in_holes(test: str, remainder: str, holes: tuple[str, ...]) -> None:
    check = split_test(test)
    assert (check.remainder, check.holes) == (remainder, holes)


def test_builtins_and_trusted_modules_stay_with_the_supervisor_unless_entry_points() -> None:
    assert split_test("assert sum(10, 15) == 6").holes == ()  # the built-in sum: no hole at all
    assert split_test("assert sum(10, 15) == 6", entry_points=["sum"]).holes == ("sum(10, 15)",)
    assert split_test("assert math.sqrt(f(4)) == 2").modules == ("math",)
    assert {"math", "re", "collections"} <= TRUSTED_MODULES


def test_holes_are_numbered_across_tests() -> None:
    a, b = split_tests(["assert f(1) == 1", "assert f(2) == g(3)"])
    assert (a.first_hole, a.holes, b.first_hole, b.holes) == (0, ("f(1)",), 1, ("f(2)", "g(3)"))
    assert b.remainder == f"{HOLE}(1) == {HOLE}(2)"


@pytest.mark.parametrize(
    "test",
    [
        "assert all(g(x) for x in range(3))",  # a call of the program with the test's own variable
        "assert sorted(f(1), key=lambda t: g(t)) == []",
        "assert obj.method(1) == 2",  # an attribute of a name of the program
        "assert np.allclose(f(1), 2)",  # a name outside the trusted set, used as a module
        "assert (y := f(1)) == 2",
    ],
)
def test_what_the_supervisor_cannot_evaluate_is_refused(test: str) -> None:
    with pytest.raises(CannotJudge, match="cannot judge"):
        split_test(test)


@pytest.mark.parametrize("bad", ["x = 1", "f(1) == 2", "assert (", "assert f(1)\nassert f(2)", ""])
def test_a_test_must_be_one_assert(bad: str) -> None:
    with pytest.raises(ValueError, match="test"):
        split_test(bad)


# ---------------------------------------------------------------------------------------------
# the codec
# ---------------------------------------------------------------------------------------------
class Color(enum.IntEnum):
    RED = 1


Point = collections.namedtuple("Point", "x y")

ROUND_TRIP = [
    None, True, False, 0, -7, 10 ** 5000, -(2 ** 70), 1.5, -0.0, math.inf, 1e-310, 2 + 3j, "", "héllo\n\udc80",
    b"\x00\xff", bytearray(b"ab"), range(1, 10, 3), [1, [2, (3, {4})]], (), {"a": [1.0], (1, 2): None},
    {frozenset({1}), "x"}, frozenset(),
]


@pytest.mark.parametrize("value", ROUND_TRIP, ids=lambda v: type(v).__name__)
def test_plain_values_round_trip_exactly(value: object) -> None:
    back = codec.decode(codec.encode(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


def test_nan_and_iterators_and_subclasses_arrive_as_built_in_types() -> None:
    assert math.isnan(codec.decode(codec.encode(float("nan"))))
    it = codec.decode(codec.encode(map(str, [1, 2])))
    assert list(it) == ["1", "2"] and type(codec.decode(codec.encode(iter([])))).__name__ == "list_iterator"
    for value, base in ((Color.RED, int), (Point(1, 2), tuple), (collections.Counter("aab"), dict),
                        (collections.OrderedDict(a=1), dict), (collections.defaultdict(int, a=1), dict)):
        back = codec.decode(codec.encode(value))
        assert type(back) is base and back == value


def test_subclass_overrides_are_not_consulted() -> None:
    class Liar(int):
        __eq__ = lambda self, other: True  # noqa: E731
        __hash__ = int.__hash__

        def __format__(self, spec: str) -> str:
            return "2"

        def __repr__(self) -> str:
            return "2"

    class Sneaky(list):
        def __iter__(self):
            return iter([2])

    assert codec.decode(codec.encode(Liar(5))) == 5
    assert codec.decode(codec.encode(Sneaky([5]))) == [5]


def test_what_is_not_plain_data_is_refused() -> None:
    class A:
        __class__ = property(lambda self: int)  # type: ignore[assignment]

    looped: list = []
    looped.append(looped)
    for value in (A(), object(), print, looped, type, Ellipsis):
        with pytest.raises((codec.NotPlainData, RecursionError)):
            codec.encode(value)


@pytest.mark.parametrize(
    "data",
    [b"", b"1", b"q", b"i;", b"i12", b"i0x1;", b"i 1;", b"i1_0;", b"f1.5", b"fzz;", b"s3:ab", b"s-1:", b"s99999999999999:",
     b"l2:N", b"l9999:N", b"d1:N", b"d1:l0:N", b"S1:l0:", b"rNNN", b"ri1;i2;f1.0;", b"c1.0;", b"NN", b"T ",
     b"l1:" * 5000 + b"N", b"s1:\xff"],
)
def test_decode_refuses_what_encode_does_not_write(data: bytes) -> None:
    with pytest.raises(codec.Malformed):
        codec.decode(data)


def test_the_wire_format_is_small_and_readable() -> None:
    assert codec.encode([1, "ab", (None, True), {2.0: b"x"}]) == b"l4:i1;s2:abt2:NTd1:f0x1.0000000000000p+1;y1:x"


def test_mbpp_assert_shapes() -> None:
    """The shape counts that docs/sandbox.md states for MBPP's 2,922 assert lines: every one is
    judged (none refused), each remainder of the form ``hole == expected``."""
    import ast
    import builtins
    import json
    from collections import Counter
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "shared" / "data" / "mbpp" / "mbpp.jsonl"
    if not path.is_file():
        pytest.skip(f"MBPP data not found at {path}")
    rows = [json.loads(line) for line in path.read_text().splitlines()]

    def is_hole(n: ast.AST) -> bool:
        return isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == HOLE

    def has_hole(n: ast.AST) -> bool:
        return any(is_hole(x) for x in ast.walk(n))

    shapes: Counter = Counter()
    holes: Counter = Counter()
    for row in rows:
        tree = ast.parse(row["code"])
        entry = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and hasattr(builtins, n.name)]
        for check in split_tests(row["test_list"], entry):
            e = ast.parse(check.remainder, mode="eval").body
            assert isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.ops[0], ast.Eq), check
            left, right = e.left, e.comparators[0]
            assert not has_hole(right), check
            if is_hole(left):
                computed = any(isinstance(x, ast.Call) for x in ast.walk(right))
                shapes["hole == computed" if computed else "hole == literal"] += 1
            else:
                shapes["built-in of hole == literal"] += 1
            for h in check.holes:
                call = ast.parse(h, mode="eval").body
                assert isinstance(call, ast.Call)
                names = {n.id for a in call.args for n in ast.walk(a) if isinstance(n, ast.Name)}
                holes["with a program name" if names - set(dir(builtins)) else "literal arguments"] += 1
    assert len(rows) == 974 and sum(shapes.values()) == 2922
    assert shapes == {"hole == literal": 2916, "hole == computed": 3, "built-in of hole == literal": 3}
    assert holes == {"literal arguments": 2913, "with a program name": 9}
