"""The one release path (issue 16): :func:`kakeibo.release.run`'s order, and that nothing else draws
central-DP noise and returns it.

Three kinds of check: the sequence itself (what is free, what is charged, what is stored, when the draw
runs); a static scan of kakeibo's source (outside the noise, mechanism and local-DP layers, every draw is
made with a source handed in by the release module, and no module makes randomness of its own); and a
dynamic audit that runs every central front door (``@private``, ``Session.sql`` with each aggregate kind,
DP-ERM ``fit``) and checks that every random word they read was read inside a release's draw step.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kakeibo
from adversarial_harness import CATALOG, base_tables
from kakeibo import graphs, release
from kakeibo.accounting import BudgetExceeded, DuplicateRequest, Ledger
from kakeibo.backends import DuckDBBackend
from kakeibo.errors import ReleaseFailed, StatementTimeout
from kakeibo.mechanisms import Laplace
from kakeibo.ml.erm import DPHuberSVM, DPLogisticRegression
from kakeibo.noise import GeneratorSource, RandomSource, SecureSource
from kakeibo.privacy import ApproxDP, PureDP

SRC = Path(kakeibo.__file__).parent
LAPLACE = Laplace(sensitivity=1, epsilon=0.25)


class _Bytes:
    """A codec for floats (what ``Session.sql`` does for tables)."""

    def encode(self, value: float, seeded: bool) -> bytes:
        return f"{value!r}|{seeded}".encode()

    def decode(self, payload: bytes) -> tuple[float, bool]:
        value, seeded = payload.decode().split("|")
        return float(value), seeded == "True"


def _draw(calls: list[str]) -> Any:
    def draw(source: RandomSource) -> float:
        calls.append("draw")
        return float(LAPLACE.release(10.0, rng=source))

    return draw


# -- the sequence ----------------------------------------------------------------------------------------


def test_a_release_is_charged_once_with_its_value_stored() -> None:
    ledger = Ledger(":memory:", budget=1)
    calls: list[str] = []
    charge = release.Charge(LAPLACE.privacy_loss, "q", request_id="r1")
    first = release.run(ledger, charge, _draw(calls), rng=np.random.default_rng(1), codec=_Bytes())
    assert first.ledger_entry is not None and first.ledger_entry.request_id == "r1"
    assert first.seeded and not first.replayed and ledger.spent() == PureDP(0.25)
    assert ledger.stored_release("r1") == _Bytes().encode(first.value, True)
    again = release.run(ledger, charge, _draw(calls), codec=_Bytes())  # answered from the ledger
    assert again.replayed and again.value == first.value and again.seeded
    assert again.ledger_entry == first.ledger_entry and calls == ["draw"]
    assert ledger.spent() == PureDP(0.25)


def test_public_refusals_are_free_and_come_before_the_draw() -> None:
    ledger = Ledger(":memory:", budget=0.3)
    calls: list[str] = []
    release.run(ledger, release.Charge(LAPLACE.privacy_loss, "q", request_id="r1"), _draw(calls))
    with pytest.raises(DuplicateRequest, match="already charged"):  # no codec: a second draw is refused
        release.run(ledger, release.Charge(LAPLACE.privacy_loss, "q", request_id="r1"), _draw(calls))
    with pytest.raises(BudgetExceeded):
        release.run(ledger, release.Charge(LAPLACE.privacy_loss, "q"), _draw(calls))

    def refuse() -> None:
        calls.append("check")
        raise ValueError("the caller's public refusal")

    with pytest.raises(ValueError, match="public refusal"):
        release.run(Ledger(":memory:", budget=1), release.Charge(PureDP(1), "q"), _draw(calls), check=refuse)
    with pytest.raises(TypeError):
        release.run(ledger, release.Charge(PureDP(0.01), "q"), _draw(calls), rng="seed")  # type: ignore[arg-type]
    assert calls == ["draw", "check"] and len(ledger.entries()) == 1


@pytest.mark.parametrize(
    "failure",
    [ValueError("the data says 42"), StatementTimeout(2.0), KeyboardInterrupt()],
    ids=["an exception", "a timeout", "an interrupt"],
)
def test_a_failure_in_the_draw_is_charged_and_says_nothing(failure: BaseException) -> None:
    ledger = Ledger(":memory:", budget=1)

    def draw(source: RandomSource) -> float:
        source.words(1)
        raise failure

    charge = release.Charge(PureDP(0.5), "q", request_id="r1")
    expected = type(failure) if not isinstance(failure, ValueError) else ReleaseFailed
    with pytest.raises(expected) as info:
        release.run(ledger, charge, draw, codec=_Bytes())
    assert "42" not in str(info.value) and info.value.__cause__ is None
    assert ledger.spent() == PureDP(0.5) and ledger.stored_release("r1") is None
    with pytest.raises(ReleaseFailed):  # a retry under the charged id: refused, nothing drawn or charged
        release.run(ledger, charge, draw, codec=_Bytes())
    assert ledger.spent() == PureDP(0.5)


def test_a_failure_after_the_charge_is_the_fixed_sentence() -> None:
    ledger = Ledger(":memory:", budget=1)

    def finish(value: float) -> float:
        raise ArithmeticError(f"cannot post-process {value}")

    with pytest.raises(ReleaseFailed) as info:
        release.run(ledger, release.Charge(PureDP(0.5), "q"), _draw([]), finish=finish)
    assert "post-process" not in str(info.value) and ledger.spent() == PureDP(0.5)


def test_a_charge_lost_to_a_concurrent_request_serves_theirs() -> None:
    """Two sessions draw for one request id; the one that commits second drops its draw and serves the
    stored release (what a concurrent retry of a query sees)."""
    ledger = Ledger(":memory:", budget=1)
    charge = release.Charge(PureDP(0.25), "q", request_id="r1")

    def draw_while_another_commits(source: RandomSource) -> float:
        release.run(ledger, charge, lambda _: 1.0, codec=_Bytes())
        return 2.0

    out = release.run(ledger, charge, draw_while_another_commits, codec=_Bytes())
    assert out.replayed and out.value == 1.0 and ledger.spent() == PureDP(0.25)


def test_no_ledger_charges_nothing_and_says_so() -> None:
    out = release.run(None, release.Charge(PureDP(1), "q"), _draw([]))
    assert out.ledger_entry is None and not out.seeded


def test_the_source_answers_only_during_the_draw() -> None:
    kept: list[RandomSource] = []

    def draw(source: RandomSource) -> float:
        kept.append(source)
        assert release.drawing()
        return float(source.words(1)[0])

    release.run(Ledger(":memory:", budget=1), release.Charge(PureDP(0.5), "q"), draw)
    assert not release.drawing()
    with pytest.raises(RuntimeError, match="finished release"):
        kept[0].words(1)


# -- nothing else draws central-DP noise and returns it: static scan ----------------------------------------

#: Layers that may make and use randomness themselves: the primitives (noise, mechanisms, the privacy
#: audit, the HDPView build, a mechanism whose callers charge it), and local DP, whose randomizers run on
#: the client and return reports, not central releases.
LOWER = (
    "noise/",
    "mechanisms/",
    "audit/",
    "views/",
    "ldp/",
    "ml/randomizers.py",
    "ml/supml.py",
    "ml/_common.py",
)
#: Calls that make randomness; allowed elsewhere only as the ``rng=`` of a ``release.run`` call.
MAKE = {"resolve_source", "random_source", "SecureSource", "GeneratorSource", "KeyedSource", "default_rng"}
#: Calls that draw; elsewhere their randomness (``rng=``, or an argument or receiver named ``source`` or
#: ``rng``) must be a parameter of an enclosing function: the draw function handed to ``release.run``.
DRAW = {"release", "release_each", "deferred", "words", "sample_noise", "noise_generator"}
RANDOMNESS = {"source", "rng"}
#: Randomness outside the release path that releases nothing, with the reason.
EXEMPT = {
    ("decorator.py", "private"): "a public default drawn once with throwaway noise and dropped",
    ("demo.py", "main"): "which rows each person keeps (a public coin, not a release) and the audit's trials",
    ("correlated/repro.py", "synthetic"): "random networks for the synthetic figure: no data, no release",
    ("synth/base.py", "sample"): "synthetic rows drawn from a fitted synthesiser's model: post-processing",
    ("sql/synthesis.py", "sample"): "synthetic rows and values drawn from the stored model: post-processing",
    ("sql/synthesis.py", "sample_codes"): "synthetic bin codes drawn from the stored model: post-processing",
    (
        "crypto/parties.py",
        "kept_rows",
    ): "which rows each person keeps: a data owner's coin, no release",
    ("crypto/parties.py", "_noise"): "the analytics server's share of two-server noise, in its own process; "
    "only the provider decrypts, inside its charged release.run",
}


def _name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _handed_in(call: ast.Call, params: frozenset[str]) -> bool:
    """Whether the call's randomness is a parameter of an enclosing function."""
    receiver = [call.func.value] if isinstance(call.func, ast.Attribute) else []
    keyword = [k.value for k in call.keywords if k.arg == "rng"]
    candidates = [*receiver, *call.args, *keyword]
    named = [a for a in candidates if isinstance(a, ast.Name) and a.id in params]
    return any(a.id in RANDOMNESS or a in keyword for a in named)


def _violations(path: Path, root: Path = SRC, exempted: set[tuple[str, str]] | None = None) -> Iterator[str]:
    """Each draw or making of randomness in ``path`` that is not on the release path (``exempted``
    collects the exemptions that were used)."""
    tree = ast.parse(path.read_text())
    relative = path.relative_to(root).as_posix()
    allowed: set[int] = set()  # ids of nodes that are the rng= of a release.run call
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node) == "run":
            allowed.update(id(k.value) for k in node.keywords if k.arg == "rng")

    def visit(node: ast.AST, params: frozenset[str], top: str) -> Iterator[str]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            params = params | {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
            if not isinstance(node, ast.Lambda) and not top:
                top = node.name
        if isinstance(node, ast.Call) and id(node) not in allowed:
            name = _name(node)
            found = None
            if name in MAKE:
                found = f"{relative}:{node.lineno} makes randomness ({name}) outside release.run"
            elif name in DRAW and not _handed_in(node, params):
                found = f"{relative}:{node.lineno} draws ({name}) without a source handed in"
            if found and (relative, top) in EXEMPT:
                (exempted if exempted is not None else set()).add((relative, top))
            elif found:
                yield found
        for child in ast.iter_child_nodes(node):
            yield from visit(child, params, top)

    yield from visit(tree, frozenset(), "")


def test_only_the_release_module_draws_central_noise_and_returns_it() -> None:
    scanned, problems, exempted = [], [], set()
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith(LOWER) or relative == "release.py":
            continue
        scanned.append(relative)
        problems.extend(_violations(path, exempted=exempted))
    assert {"decorator.py", "sql/session.py", "sql/quantiles.py", "ml/erm.py", "graphs.py"} <= set(scanned)
    assert problems == []
    assert exempted == set(EXEMPT)  # no stale exemption


def test_the_scan_finds_a_draw_outside_the_release_path(tmp_path: Path) -> None:
    """The scanner itself: each shape of a stray draw is reported."""
    stray = tmp_path / "stray.py"
    stray.write_text(
        "def answer(m, x):\n"
        "    return m.release(x)\n"  # draws with a secure source of its own
        "def seeded(m, x):\n"
        "    return m.release(x, rng=np.random.default_rng(0))\n"
        "def handed(m, x, source):\n"
        "    return m.release(x, rng=source)\n"  # fine: the source is handed in
    )
    found = list(_violations(stray, tmp_path))
    assert len(found) == 3 and all(f.startswith("stray.py:") for f in found)
    assert [f.split(":")[1].split()[0] for f in found] == ["2", "4", "4"]


# -- nothing else draws: dynamic audit of every central front door ----------------------------------------


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each read of a random source happened inside a release's draw step."""
    seen: list[bool] = []
    for cls in (SecureSource, GeneratorSource):
        original = cls.words

        def words(self: Any, n: int, _original: Any = original) -> Any:
            seen.append(release.drawing())
            return _original(self, n)

        monkeypatch.setattr(cls, "words", words)
    return seen


QUERIES = [
    "SELECT COUNT(*) AS n FROM visits",
    "SELECT SUM(amount) AS s, AVG(amount) AS a, STDDEV(amount) AS sd FROM visits",
    "SELECT category, COUNT(*) AS n FROM visits GROUP BY category",  # public keys
    "SELECT building, COUNT(*) AS n FROM visits GROUP BY building",  # private keys: partition selection
    "SELECT QUANTILE(amount, 0.5) AS median FROM visits",
]


@pytest.mark.parametrize("rng", [None, 7], ids=["secure", "seeded"])
def test_every_central_front_door_draws_inside_a_release(tmp_path: Path, reads: list[bool], rng: Any) -> None:
    generator = None if rng is None else np.random.default_rng(rng)
    ledger = Ledger(tmp_path / "l.sqlite", budget=ApproxDP(100, 1e-3))

    @kakeibo.private(mechanism=LAPLACE, ledger=ledger)
    def count(values: list[int]) -> float:
        return float(len(values))

    reads.clear()  # decorating drew the public default once (EXEMPT above)
    shapes: list[tuple[Any, Any, Any]] = []  # (privacy_loss, ledger_entry, confidence) of each result
    released = count([1, 2, 3], rng=generator)
    shapes.append((released.privacy_loss, released.ledger_entry, released.confidence))
    db = DuckDBBackend()
    for name, table in base_tables().items():
        db.load_table(name, table)
    session = kakeibo.connect(db, catalog=CATALOG, ledger=ledger)
    for query in QUERIES:
        result = session.sql(query, epsilon=1, delta=1e-5, rng=generator)
        shapes.append((result.privacy_loss, result.ledger_entry, result.confidence))
    X = np.random.default_rng(0).normal(size=(80, 3))
    y = np.where(X[:, 0] > 0, 1, -1)
    for model in (DPLogisticRegression, DPHuberSVM):
        for method in ("objective", "output"):
            fitted = model(epsilon=1, classes=(-1, 1), method=method, ledger=ledger, random_state=generator)
            fitted.fit(X, y)
            shapes.append((fitted.privacy_loss_, fitted.ledger_entry_, None))
    triangles = graphs.count(
        [(0, 1), (1, 2), (2, 0)], "triangle", epsilon=1, max_degree=4, ledger=ledger, rng=generator
    )
    shapes.append((PureDP(1), triangles.ledger_entry, None))
    assert len(reads) > 0 and all(reads)
    # every result reads alike: its loss, and the ledger entry that charged exactly that loss, in order
    assert [entry for _, entry, _ in shapes] == ledger.entries()
    assert all(loss == entry.loss for loss, entry, _ in shapes)
    assert {confidence for *_, confidence in shapes} == {0.95, None}
