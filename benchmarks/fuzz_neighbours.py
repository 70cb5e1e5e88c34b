"""The differential fuzzer of ``tests/test_adversarial_fuzz.py``, run long, plus the latency side channels.

Each generated call (``adversarial_harness.queries``: the grammar the DP SQL analyser accepts, with
boundary literals, NULLs and wrong-typed literals, in a drawn dialect, with or without ``nonnegative``)
runs on a pair of neighbouring databases -- the base, and the base plus one user with extreme values --
with a fresh ledger for each call. A *mismatch* is any
difference an analyst could see: acceptance, error class, error text, charge, released schema, or a
number in an error text that no public input holds. Unlike the unit test, which stops at the first
mismatch, this records every one and prints a table::

    engine    tried  accepted  refused  laddered  mismatches  seconds

(``laddered``: answered calls whose totals a ladder truncated in either world, ``bound_selection =
"ladder"``, issue 31) followed by the first few mismatching queries with both outcomes. ``--timing`` (on
by default) adds the latency the unit tests may not assert: how long a huge literal takes to refuse, and
how long the wildcard-heavy LIKE patterns of issue 15 (G2) take on each world, side by side.

Usage (from the repository root)::

    .venv/bin/python benchmarks/fuzz_neighbours.py --examples 500 --engines duckdb,postgres,spark
    .venv/bin/python benchmarks/fuzz_neighbours.py --grammar numbers --examples 3000 --no-timing \
        --engines duckdb,postgres,spark

``--grammar numbers`` draws ``adversarial_harness.numeric_query`` calls instead (independent seeded draws of
aggregates over columns and expressions at the flush and overflow edges, with extreme ``bounds=``; issue 29).

PostgreSQL is started as a throwaway server (the test suite's ``postgres_server`` fixture, run outside
pytest); Spark runs in local mode (``local[2]``). The run is reproducible (hypothesis derandomised) unless
``--seed`` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import adversarial_harness as harness  # noqa: E402

LIKE_TIMING = (
    # refused until issue 32 (more than two '%'), answered since: on Spark as the RLIKE of
    # kakeibo.sql.predicates.linear_like, whose time is linear in the row's length
    "SELECT COUNT(*) AS n FROM visits WHERE name LIKE '%_%_%_%_%_%_%_%_%_%_%_!'",
    "SELECT COUNT(*) AS n FROM visits WHERE name LIKE '%_%_%_%_%_%_%_%_%_%_%_%_%_!'",
    "SELECT COUNT(*) AS n FROM people WHERE city LIKE '%_%_!'",
    # 3, 5 and 11 '%' over the target's 4,096-character row, failing only at the end: Spark's own LIKE
    # would try every split of the row (issue 32)
    "SELECT COUNT(*) AS n FROM people WHERE city LIKE '%z%z%q'",
    "SELECT COUNT(*) AS n FROM people WHERE city LIKE '%z%z_z%z%z%q'",
    "SELECT COUNT(*) AS n FROM people WHERE city LIKE '%z%z%z%z%z%z%z%z%z%z%q'",
    # at most two '%', the second at the end: Spark's own LIKE, linear in the row's length
    "SELECT COUNT(*) AS n FROM people WHERE city LIKE '%z_z%'",
    "SELECT COUNT(*) AS n FROM people WHERE city LIKE 'T%z!'",
)
LITERAL_TIMING = (
    "SELECT COUNT(*) AS n FROM visits LIMIT 1e10000000",
    "SELECT COUNT(*) AS n FROM visits WHERE age < 1e10000000",
    "SELECT COUNT(*) AS n FROM visits WHERE x = 0." + "0" * 100000 + "1",
)


@dataclass
class Tally:
    engine: str
    tried: int = 0
    accepted: int = 0
    refused: int = 0
    laddered: int = 0
    seconds: float = 0.0
    mismatches: list[tuple[harness.Drawn, list[str], dict[str, harness.Outcome]]] = field(
        default_factory=list
    )


@contextlib.contextmanager
def _postgres() -> Iterator[str]:
    import backend_fixtures

    # the fixture's own generator, run outside pytest
    server = contextlib.contextmanager(backend_fixtures.postgres_server.__wrapped__)  # type: ignore[attr-defined]
    with server() as conninfo:
        yield conninfo


@contextlib.contextmanager
def _resources(engines: list[str]) -> Iterator[dict[str, Any]]:
    with contextlib.ExitStack() as stack:
        resources: dict[str, Any] = {}
        if "postgres" in engines:
            resources["postgres_conninfo"] = stack.enter_context(_postgres())
        if "spark" in engines:
            from kakeibo.backends.spark import SparkBackend

            spark = SparkBackend("local[2]")
            stack.callback(spark.close)
            resources["spark"] = spark
        yield resources


def fuzz(
    worlds: harness.Worlds, examples: int, seed: int | None, ledgers: Path, timeout: float, grammar: str
) -> Tally:
    """Run ``examples`` calls of ``grammar`` on both worlds: ``queries`` (hypothesis, derandomised unless
    ``seed``; ``clause``: the same with BigQuery's DP clause on every call without a join) or
    ``numbers`` (``harness.numeric_query`` of ``random.Random(seed + i)``, ``seed`` 0 by
    default: the draws ``tests/test_adversarial_fuzz.py`` starts with)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    tally = Tally(worlds.engine)
    seen: set[str] = set()
    start = time.perf_counter()

    def check(drawn: harness.Drawn) -> None:
        key = repr(drawn)
        if key in seen:
            return
        seen.add(key)
        outcomes, problems = harness.compare(
            worlds,
            drawn.query,
            drawn.epsilon,
            ledger_dir=ledgers,
            timeout=timeout if worlds.engine == "spark" else None,
            **drawn.options(),
        )
        tally.tried += 1
        pair = [outcomes[w] for w in harness.WORLDS]
        if all(o.accepted for o in pair):
            tally.accepted += 1
        elif not any(o.accepted for o in pair):
            tally.refused += 1
        if any(o.truncated for o in pair):
            tally.laddered += 1
        if problems:
            tally.mismatches.append((drawn, problems, outcomes))

    if grammar == "numbers":
        for i in range(examples):
            check(harness.numeric_query(random.Random((seed or 0) + i)))
    else:

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=seed is None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(harness.queries(clause_every=1 if grammar == "clause" else 7))
        def run(drawn: harness.Drawn) -> None:
            check(drawn)

        if seed is not None:
            run = hypothesis_seed(seed)(run)
        run()
    tally.seconds = time.perf_counter() - start
    return tally


def timing(worlds: harness.Worlds, ledgers: Path, timeout: float) -> list[tuple[str, str, float, float, str]]:
    rows = []
    for query in (*LITERAL_TIMING, *LIKE_TIMING):
        outcomes = harness.neighbour_outcomes(
            worlds, query, 1, ledger_dir=ledgers, timeout=timeout if worlds.engine == "spark" else None
        )
        base, target = outcomes["base"], outcomes["target"]
        verdict = "answered" if base.accepted else (base.error_class or "").rsplit(".", 1)[-1]
        if base.accepted != target.accepted:
            verdict += " / " + (
                "answered" if target.accepted else (target.error_class or "").rsplit(".", 1)[-1]
            )
        rows.append((worlds.engine, query, base.seconds, target.seconds, verdict))
    return rows


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--examples", type=int, default=200, help="generated queries per engine (default 200)"
    )
    parser.add_argument(
        "--engines", default="duckdb", help="comma-separated: duckdb,postgres,spark (default duckdb)"
    )
    parser.add_argument(
        "--grammar",
        choices=("queries", "numbers", "clause"),
        default="queries",
        help="queries: the analyser's whole grammar (hypothesis); numbers: numeric_query's independent "
        "draws; clause: the grammar with BigQuery's DP clause on every call without a join",
    )
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: derandomised)")
    parser.add_argument("--show", type=int, default=5, help="mismatching queries to print per engine")
    parser.add_argument("--no-timing", action="store_true", help="skip the latency table")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds before a Spark statement is cancelled"
    )
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - set(harness.ENGINES))
    if unknown:
        parser.error(f"unknown engine(s) {', '.join(unknown)}; choose from {', '.join(harness.ENGINES)}")

    tallies: list[Tally] = []
    timings: list[tuple[str, str, float, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="kakeibo-fuzz-") as tmp, _resources(engines) as resources:
        ledgers = Path(tmp)
        for worlds in harness.iter_engine_worlds(tuple(engines), **resources):
            print(f"fuzzing {worlds.engine} with {args.examples} examples ...", file=sys.stderr, flush=True)
            tallies.append(fuzz(worlds, args.examples, args.seed, ledgers, args.timeout, args.grammar))
            if not args.no_timing:
                timings.extend(timing(worlds, ledgers, args.timeout))

    header = f"{'engine':<10}{'tried':>7}{'accepted':>10}{'refused':>9}{'laddered':>10}{'mismatches':>12}"
    print(f"{header}{'seconds':>10}")
    for t in tallies:
        counts = f"{t.tried:>7}{t.accepted:>10}{t.refused:>9}{t.laddered:>10}{len(t.mismatches):>12}"
        print(f"{t.engine:<10}{counts}{t.seconds:>10.1f}")
    for t in tallies:
        if not t.mismatches:
            continue
        print(f"\nfirst mismatches on {t.engine}:")
        for drawn, problems, outcomes in t.mismatches[: args.show]:
            print(f"- {_short(drawn.query, 400)}  ({drawn.options()}, epsilon={drawn.epsilon!r})")
            for problem in problems:
                print(f"    {_short(problem, 300)}")
            print(f"    base:   {outcomes['base'].short(200)}")
            print(f"    target: {outcomes['target'].short(200)}")
    if timings:
        print(f"\n{'engine':<10}{'base s':>8}{'target s':>10}  {'outcome':<28}query")
        for engine, query, base_s, target_s, verdict in timings:
            print(
                f"{engine:<10}{base_s:>8.3f}{target_s:>10.3f}  {_short(verdict, 28):<28}{_short(query, 90)}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
