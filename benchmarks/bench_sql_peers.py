"""DP SQL against peers on the same ``visits`` data: wall time, peak memory and error per aggregate.

Run (issue 19)::

    .venv/bin/python benchmarks/bench_sql_peers.py --rows 1000000 --shape visits light \\
        --smartnoise-python /tmp/peers/sql-snsql/bin/python \\
        --pipelinedp-python /tmp/peers/sql-pipelinedp/bin/python \\
        --opendp-python /tmp/peers/sql-opendp/bin/python

Peer environments (each peer in a venv of its own; a peer child imports only its peer, numpy and pyarrow,
never kakeibo, so no ``-e .`` is needed there)::

    python3 -m venv /tmp/peers/sql-snsql && /tmp/peers/sql-snsql/bin/pip install smartnoise-sql==1.0.10 \\
        pyarrow numpy
    python3 -m venv /tmp/peers/sql-pipelinedp && /tmp/peers/sql-pipelinedp/bin/pip install \\
        pipeline-dp==0.3.1 pyarrow numpy
    python3 -m venv /tmp/peers/sql-opendp && /tmp/peers/sql-opendp/bin/pip install opendp==0.14.2 \\
        polars==1.32.0 pyarrow numpy

OpenDP 0.14 needs polars 1.32 while kakeibo's dev environment has polars 2, hence its own venv. Without its
``--<peer>-python`` option a peer runs in the current interpreter if it imports there, and is skipped with
the reason otherwise. ``--smartnoise-python`` and ``--opendp-python`` also serve ``--corpus`` below.

Query: per-category ``COUNT(*)``, ``SUM(amount)``, ``AVG(amount)`` and ``MEDIAN(amount)`` (``QUERY``), epsilon
= 1 for the whole query (delta 1e-6 where a system takes one), the 20 categories public. Each data shape
(``--shape``) comes with hand-set bounds given to every system alike:

* ``visits``: ``make_visits`` of ``bench_sql.py`` (Zipf rows per user, up to 500, amount Gamma(2, 15)); the
  bounds of issue 3: at most kappa = 5 rows per user and category, at most L0 = 3 categories per user,
  amount clamped to [0, 100]. Here the bounds are too small for the heavy users: the error is mostly bias.
* ``light`` (``make_light_visits``): light users, each with 1-3 rows (uniformly), categories and amounts
  drawn as in ``visits``; the hand-set bounds are 100 times the typical contribution: kappa = 20, L0 = 10
  (kappa * L0 = 200 rows against 2 rows for a typical user) and amount in [0, 3000] (100 times the mean
  amount, 30). Nothing is truncated or clamped, so any gain over the hand-set rows must come from less
  noise, not less bias.

Each system runs in a child process of its own (this file, ``--child``) that reads the table from a Parquet
file, times only the query (best of ``--repeats`` for the DuckDB rows, ``--peer-repeats`` for the others),
and reports its peak resident memory (``VmHWM``), so the memory figures do not mix; a child that only loads
the data gives the baseline. A child that fails or times out is reported in the table with its last error
line, and the run goes on. Error, per aggregate: the median relative error over the 20 categories (pooled
over the child's repeats) against the exact, unbounded and noise-free answer (DuckDB, ``MEDIAN`` =
``quantile_cont(0.5)``); a category a system does not release counts as 0 (error 1); "n/a" where the system
has no such aggregate. The row "bounding alone" is the error of the hand-set bounds without noise: random
kappa rows per (user, category), then random L0 categories per user, amount clamped (DuckDB's random()).

Systems and how the bounds map onto them:

* ``kakeibo``: ``session.sql(QUERY, epsilon=1)`` on a ``DuckDBBackend``, with the catalog of
  ``kakeibo_catalog(shape, variant)``, the one place the catalogs are written. ``--kakeibo-catalog`` picks
  the variants: ``handset`` (the shape's bounds; for ``visits`` it equals ``bench_sql.CATALOG``) and
  ``auto``, privately chosen bounds (issue 19): the hand-set dict with ``"max_rows_per_person": "auto"`` on
  the table and ``"lower": "auto", "upper": "auto"`` on amount -- a placeholder until the catalog takes
  these keys; until then its child fails and the table says why. ``--spark`` adds the handset catalog on
  Spark ``local[2]``.
* SmartNoise SQL 1.0.10 (``snsql.from_df`` on pandas): it bounds only the total rows per user (``max_ids``
  = kappa * L0), takes no public key list on a pandas reader and thresholds the released groups with
  delta (``censor_dims``). Its ``Privacy(epsilon=...)`` is per mechanism: the query above costs 4 epsilon
  at ``epsilon=1`` (``get_privacy_cost``), so the child divides epsilon and delta by the query's cost to
  spend 1 in all (issue 3's run gave it 4). It has no median (``PERCENTILE_*`` does not parse or is not
  rewritten): n/a.
* PipelineDP 0.3.1 (``LocalBackend``, Laplace): ``max_partitions_contributed = L0``,
  ``max_contributions_per_partition = kappa``, ``min_value``/``max_value`` the amount bounds, the 20 public
  partitions; metrics COUNT, SUM, MEAN and PERCENTILE(50) (its quantile tree), which split epsilon three
  ways (mean's count, mean's sum, quantiles). The rows are Python tuples (made before the timed part).
* PipelineDP with ``DPEngine.calculate_private_contribution_bounds`` (experimental): the same, but L0 is
  chosen by its exponential mechanism (``--pipelinedp-bounds-share`` of epsilon, default 0.1, up to the
  20 partitions); kappa and the amount bounds stay hand-set, as PipelineDP chooses nothing else. Its
  scoring function is for COUNT only (``aggregation_eps`` = what COUNT gets: a third of the rest); the
  chosen L0 is used for all four metrics, so the SUM, AVG and MEDIAN cells of that row use a bound chosen
  for counts. The chosen L0 is in the row's note.
* OpenDP 0.14.2 (polars frontend): ``unit_of(contributions=1, identifier="user_id")`` (one identifier per
  user), ``truncate_per_group(kappa, by=category)``, ``truncate_num_groups(L0 + 1, by=category,
  keep="first")`` (skipped when L0 >= 20: the 20 public keys bound it), public keys, the table size as the
  public bound on a group's length; ``dp.len()``, ``dp.sum`` of the clamped amount and ``dp.median`` over
  1,024 candidates (the midpoints of kakeibo's 1,024 buckets of the amount bounds); AVG = sum / len.
  Two OpenDP quirks in 0.14.2 (also in 0.16.0): ``truncate_num_groups(k)`` keeps ranks ``< k`` of a dense
  rank that starts at 1, i.e. k - 1 groups, while its accounting charges for k, hence ``L0 + 1`` (which
  keeps L0 groups and is charged L0 + 1); ``keep="first"`` keeps a user's lexicographically smallest
  categories, not the first rows, and ``keep="sample"`` fails on one grouping column ("multiple fields with
  name 'category'"). The lexicographic choice is what lifts OpenDP's COUNT error on ``visits`` above the
  others' (bounding alone, no noise, at 10^6 rows: 0.94 with each user's 3 smallest categories against 0.82
  with 3 random ones). Issue 3's configuration, ``unit_of(contributions=[Bound(by=["category"],
  per_group=5), Bound(num_groups=3)], identifier="user_id")`` with ``truncate_num_groups(3)``, counts
  identifiers, not rows: OpenDP then assumed 5 identifiers per user in each of the 20 categories, and its
  noise scale for COUNT and SUM (epsilon 1 over both) was 996 and 100,445 instead of 30 and 3,014 (33 times
  too large), while it kept only 2 categories per user.

``--corpus`` runs a different comparison instead (issue 17): every query of the SQL corpus of
``tests/sql_corpus.py`` on kakeibo, SmartNoise SQL, Qrlew and OpenDP's polars front end, counting what each
answers and its median time per query; each peer may run in an environment of its own
(``--smartnoise-python``, ``--qrlew-python``, ``--opendp-python``). See ``sql_corpus_peers.py`` for the
environments, the mapping of the catalog onto each peer and what is timed.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from sql_corpus_peers import add_arguments, main_corpus

EPSILON, DELTA = 1.0, 1e-6
CATEGORIES = [f"c{i:02d}" for i in range(20)]  # bench_sql.CATEGORIES (checked in the parent)
AGGREGATES = ("COUNT", "SUM", "AVG", "MEDIAN")
QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, MEDIAN(amount) AS median "
    "FROM visits GROUP BY category"
)
QUANTILE_CANDIDATES = 1024  # kakeibo's DEFAULT_BUCKETS: the resolution of OpenDP's median candidates
CATALOG_VARIANTS = ("handset", "auto")

Answer = dict[str, list[float | None]]  # category -> [count, sum, avg, median]; None: not computed


@dataclass(frozen=True)
class Shape:
    """A data shape and the hand-set bounds every system gets on it."""

    name: str
    kappa: int  # rows per user and category
    l0: int  # categories per user
    lower: float  # amount bounds
    upper: float


SHAPES = {
    "visits": Shape("visits", kappa=5, l0=3, lower=0.0, upper=100.0),  # bench_sql.make_visits
    "light": Shape("light", kappa=20, l0=10, lower=0.0, upper=3000.0),  # make_light_visits
}


def make_light_visits(rows: int, seed: int = 1) -> pa.Table:
    """Light users: 1-3 rows each (uniformly); categories and amounts drawn as in ``make_visits``."""
    rng = np.random.default_rng(seed)
    per_user = rng.integers(1, 4, size=rows)
    users = np.repeat(np.arange(per_user.size), per_user)[:rows]
    weights = 1 / np.arange(1, 21)
    category = rng.choice(np.array(CATEGORIES), size=users.size, p=weights / weights.sum())
    amount = np.round(rng.gamma(2.0, 15.0, size=users.size), 2)
    return pa.table({"user_id": users, "category": category, "amount": amount})


def make_table(shape: str, rows: int) -> pa.Table:
    if shape == "light":
        return make_light_visits(rows)
    from bench_sql import make_visits

    return make_visits(rows)


def kakeibo_catalog(shape: Shape, variant: str) -> dict[str, Any]:
    """kakeibo's catalog of the ``visits`` table: ``handset`` (the shape's bounds) or ``auto`` (chosen
    privately by kakeibo, ``kakeibo.sql.bounds``: the handset dict with ``"auto"`` limits and amount
    bounds)."""
    handset: dict[str, Any] = {
        "tables": {
            "visits": {
                "privacy_unit": "user_id",
                "max_partitions": shape.l0,
                "max_rows_per_partition": shape.kappa,
                "columns": {
                    "user_id": {"type": "int"},
                    "category": {"type": "str", "public_values": list(CATEGORIES)},
                    "amount": {"type": "float", "lower": shape.lower, "upper": shape.upper},
                },
            }
        }
    }
    if variant == "handset":
        return handset
    if variant == "auto":
        auto = copy.deepcopy(handset)
        auto["tables"]["visits"].update(max_partitions="auto", max_rows_per_partition="auto")
        auto["tables"]["visits"]["columns"]["amount"].update(lower="auto", upper="auto")
        return auto
    raise ValueError(f"unknown catalog variant {variant!r} (known: {', '.join(CATALOG_VARIANTS)})")


# --- the children: each runs one system on the Parquet file and returns (seconds, answers, note) ---


@dataclass(frozen=True)
class Job:
    path: str
    shape: Shape
    repeats: int
    catalog: str  # kakeibo's catalog variant
    bounds_share: float  # PipelineDP's share of epsilon for its private L0


Result = tuple[float, list[Answer], str]


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _best(run: Callable[[], Answer], repeats: int) -> tuple[float, list[Answer]]:
    best, answers = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        answers.append(run())
        best = min(best, time.perf_counter() - start)
    return best, answers


def _duckdb_table(path: str) -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE TABLE visits AS SELECT * FROM read_parquet('{path}')")
    return con


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def child_load(job: Job) -> Result:
    pq.read_table(job.path)
    return float("nan"), [], ""


def child_raw(job: Job) -> Result:
    con = _duckdb_table(job.path)
    sql = (
        "SELECT category, COUNT(*), SUM(amount), AVG(amount), quantile_cont(amount, 0.5) FROM visits "
        "GROUP BY category"
    )
    seconds, answers = _best(
        lambda: {c: [float(n), float(s), float(a), float(m)] for c, n, s, a, m in con.sql(sql).fetchall()},
        job.repeats,
    )
    return seconds, answers, "exact, unbounded"


def child_floor(job: Job) -> Result:
    con = _duckdb_table(job.path)
    sql = (
        "SELECT category, SUM(n), SUM(s) FROM (SELECT user_id, category, COUNT(*) AS n, SUM(amount) AS s "
        "FROM visits GROUP BY user_id, category) GROUP BY category"
    )
    seconds, _ = _best(lambda: {c: [float(n), float(s)] for c, n, s in con.sql(sql).fetchall()}, job.repeats)
    return seconds, [], "COUNT and SUM only: the timing floor"


def _kakeibo(backend: Any, job: Job) -> Result:
    import kakeibo
    from kakeibo.accounting import Ledger
    from kakeibo.sql import Catalog

    catalog = Catalog.from_dict(kakeibo_catalog(job.shape, job.catalog))
    session = kakeibo.connect(backend, catalog=catalog, ledger=Ledger(":memory:", budget=10**6))
    counter = iter(range(10**6))
    spent: list[str] = []

    def run() -> Answer:  # a new LIMIT each time, so the stored release does not answer
        released = session.sql(f"{QUERY} LIMIT {1000 + next(counter)}", epsilon=EPSILON)
        spent.append(str(released.privacy_loss))
        return {
            r["category"]: [_num(r["n"]), _num(r["total"]), _num(r["mean"]), _num(r["median"])]
            for r in released.to_arrow().to_pylist()
        }

    seconds, answers = _best(run, job.repeats)
    return seconds, answers, f"{spent[-1]} per release"


def child_kakeibo(job: Job) -> Result:
    from kakeibo.backends import DuckDBBackend

    return _kakeibo(DuckDBBackend(_duckdb_table(job.path)), job)


def child_kakeibo_spark(job: Job) -> Result:
    from kakeibo.backends.spark import SparkBackend

    spark = SparkBackend(conf={"spark.driver.memory": "6g"}, quick_jit=False)
    spark.load_table("visits", pq.read_table(job.path))
    return _kakeibo(spark, job)


def child_smartnoise(job: Job) -> Result:
    import snsql  # type: ignore[import-not-found, unused-ignore]

    shape = job.shape
    frame = pq.read_table(job.path).to_pandas()
    metadata = {
        "bench": {
            "visits": {
                "visits": {
                    "max_ids": shape.kappa * shape.l0,
                    "row_privacy": False,
                    "user_id": {"type": "int", "private_id": True},
                    "category": {"type": "string"},
                    "amount": {"type": "float", "lower": shape.lower, "upper": shape.upper},
                }
            }
        }
    }
    sql = QUERY.replace(", MEDIAN(amount) AS median", "").replace("FROM visits", "FROM visits.visits")
    # Privacy(epsilon) is per mechanism: scale it so that the whole query costs EPSILON (and DELTA)
    unit = snsql.Privacy(epsilon=1.0, delta=DELTA)
    cost_epsilon, cost_delta = snsql.from_df(frame.head(1), privacy=unit, metadata=metadata).get_privacy_cost(
        sql
    )
    privacy = snsql.Privacy(epsilon=EPSILON / cost_epsilon, delta=DELTA * DELTA / cost_delta)
    reader = snsql.from_df(frame, privacy=privacy, metadata=metadata)
    spent_epsilon, spent_delta = reader.get_privacy_cost(sql)

    def run() -> Answer:
        rows = reader.execute(sql)
        return {str(r[0]): [_num(r[1]), _num(r[2]), _num(r[3]), None] for r in rows[1:]}

    seconds, answers = _best(run, job.repeats)
    note = (
        f"epsilon {privacy.epsilon:.3f} per mechanism; query costs epsilon {spent_epsilon:.3f}, "
        f"delta {spent_delta:.2g}"
    )
    return seconds, answers, note


def _pipelinedp_rows(path: str) -> list[tuple[int, str, float]]:
    table = pq.read_table(path)
    return list(
        zip(
            table["user_id"].to_numpy().tolist(),
            table["category"].to_pylist(),
            table["amount"].to_numpy().tolist(),
            strict=True,
        )
    )


def _pipelinedp_aggregate(
    rows: list[tuple[int, str, float]], shape: Shape, l0: int, epsilon: float
) -> Answer:
    import pipeline_dp  # type: ignore[import-not-found, unused-ignore]

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=DELTA)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        metrics=[
            pipeline_dp.Metrics.COUNT,
            pipeline_dp.Metrics.SUM,
            pipeline_dp.Metrics.MEAN,
            pipeline_dp.Metrics.PERCENTILE(50),
        ],
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=l0,
        max_contributions_per_partition=shape.kappa,
        min_value=shape.lower,
        max_value=shape.upper,
    )
    result = engine.aggregate(rows, params, _pipelinedp_extractors(), public_partitions=CATEGORIES)
    accountant.compute_budgets()
    return {key: [float(m.count), float(m.sum), float(m.mean), float(m.percentile_50)] for key, m in result}


def _pipelinedp_extractors() -> Any:
    import pipeline_dp  # type: ignore[import-not-found, unused-ignore]

    return pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda r: r[0],
        partition_extractor=lambda r: r[1],
        value_extractor=lambda r: r[2],
    )


def child_pipelinedp(job: Job) -> Result:
    rows = _pipelinedp_rows(job.path)
    seconds, answers = _best(
        lambda: _pipelinedp_aggregate(rows, job.shape, job.shape.l0, EPSILON), job.repeats
    )
    return seconds, answers, "epsilon 1/3 each: mean's count, mean's sum, quantile tree"


def child_pipelinedp_auto(job: Job) -> Result:
    import pipeline_dp  # type: ignore[import-not-found, unused-ignore]

    rows = _pipelinedp_rows(job.path)
    chosen: list[int] = []
    calculation, aggregation = EPSILON * job.bounds_share, EPSILON * (1 - job.bounds_share)

    def run() -> Answer:
        engine = pipeline_dp.DPEngine(
            pipeline_dp.NaiveBudgetAccountant(total_epsilon=aggregation, total_delta=DELTA),
            pipeline_dp.LocalBackend(),
        )
        params = pipeline_dp.CalculatePrivateContributionBoundsParams(
            aggregation_noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            aggregation_eps=aggregation / 3,  # COUNT's share: MEAN's count, MEAN's sum and the quantiles
            aggregation_delta=0.0,
            calculation_eps=calculation,
            max_partitions_contributed_upper_bound=len(CATEGORIES),
        )
        bounds = engine.calculate_private_contribution_bounds(
            rows, params, _pipelinedp_extractors(), partitions=CATEGORIES
        )
        l0 = int(next(iter(bounds)).max_partitions_contributed)
        chosen.append(l0)
        return _pipelinedp_aggregate(rows, job.shape, l0, aggregation)

    seconds, answers = _best(run, job.repeats)
    note = (
        f"L0 chosen: {', '.join(map(str, chosen))} (epsilon {calculation:g}); kappa {job.shape.kappa} "
        f"and amount bounds hand-set; epsilon {aggregation:g} for the aggregation"
    )
    return seconds, answers, note


def child_opendp(job: Job) -> Result:
    import opendp.prelude as dp  # type: ignore[import-not-found, unused-ignore]
    import polars as pl

    dp.enable_features("contrib")
    shape = job.shape
    table = pq.read_table(job.path)
    frame = pl.DataFrame(table).lazy()
    keys = pl.DataFrame({"category": CATEGORIES})
    width = (shape.upper - shape.lower) / QUANTILE_CANDIDATES
    candidates = [shape.lower + width * (i + 0.5) for i in range(QUANTILE_CANDIDATES)]
    category = pl.col("category")

    def query() -> Any:
        context = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(contributions=1, identifier="user_id"),
            privacy_loss=dp.loss_of(epsilon=EPSILON),
            split_evenly_over=1,
            margins=[dp.polars.Margin(by=["category"], invariant="keys", max_length=table.num_rows)],
        )
        plan = context.query().truncate_per_group(shape.kappa, by=[category])
        if shape.l0 < len(CATEGORIES):  # k + 1: OpenDP 0.14 keeps k - 1 groups for truncate_num_groups(k)
            plan = plan.truncate_num_groups(shape.l0 + 1, by=[category], keep="first")
        amount: Any = pl.col("amount").fill_null(0.0)  # with OpenDP's .dp namespace
        return (
            plan.group_by("category")
            .agg(
                dp.len(),
                amount.dp.sum((shape.lower, shape.upper)),
                amount.dp.median(candidates).alias("median"),
            )
            .with_keys(keys)
        )

    def run() -> Answer:
        released = query().release().collect()
        return {
            c: [float(n), float(s), float(s) / max(float(n), 1.0), float(m)]
            for c, n, s, m in released.select("category", "len", "amount", "median").iter_rows()
        }

    summary = query().summarize()
    scales = ", ".join(f"{a} {s:.4g}" for a, s in zip(summary["aggregate"], summary["scale"], strict=True))
    seconds, answers = _best(run, job.repeats)
    return seconds, answers, f"noise scales: {scales}"


CHILDREN: dict[str, tuple[str, Callable[[Job], Result]]] = {
    "load": ("load the data only (baseline memory)", child_load),
    "raw": ("raw DuckDB GROUP BY category (no DP)", child_raw),
    "floor": ("floor: DuckDB aggregate by (user, category)", child_floor),
    "kakeibo": ("kakeibo session.sql on DuckDB", child_kakeibo),
    "spark": ("kakeibo session.sql on Spark local[2]", child_kakeibo_spark),
    "smartnoise": ("SmartNoise SQL (pandas reader)", child_smartnoise),
    "pipelinedp": ("PipelineDP (LocalBackend)", child_pipelinedp),
    "pipelinedp-auto": ("PipelineDP, L0 by calculate_private_contribution_bounds", child_pipelinedp_auto),
    "opendp": ("OpenDP (polars frontend)", child_opendp),
}
PEERS = {  # child -> (option naming its interpreter, what it imports, distributions whose versions to show)
    "smartnoise": ("smartnoise_python", "import snsql, pandas", ("smartnoise-sql", "pandas")),
    "pipelinedp": ("pipelinedp_python", "import pipeline_dp", ("pipeline-dp", "python-dp")),
    "pipelinedp-auto": ("pipelinedp_python", "import pipeline_dp", ("pipeline-dp", "python-dp")),
    "opendp": ("opendp_python", "import opendp.prelude, polars", ("opendp", "polars")),
}
SLOW = ("smartnoise", "pipelinedp", "pipelinedp-auto")
MISSING = {"smartnoise": ("MEDIAN",)}  # aggregates a system does not have: "n/a"


def _versions(child: str) -> dict[str, str]:
    names = PEERS[child][2] if child in PEERS else ("kakeibo", "duckdb") if child != "load" else ()
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "?"
    return out


# --- the parent ---


def _bounding_alone(path: str, shape: Shape) -> Answer:
    """The hand-set bounds without noise: kappa random rows per (user, category), then L0 random categories
    per user, amount clamped (DuckDB's random(), seeded, though its threads may reorder the draws)."""
    con = _duckdb_table(path)
    con.execute("SELECT setseed(0.19)").fetchall()
    keys = ", ".join(f"'{c}'" for c in CATEGORIES)
    sql = f"""
    WITH f AS (
      SELECT user_id AS u, category AS g, LEAST(GREATEST(amount, {shape.lower}), {shape.upper}) AS v,
             random() AS r FROM visits WHERE category IN ({keys})),
    rows_kept AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY u, g ORDER BY r) AS k FROM f),
    pairs AS (SELECT u, g, ROW_NUMBER() OVER (PARTITION BY u ORDER BY r) AS rank
              FROM (SELECT u, g, random() AS r FROM (SELECT DISTINCT u, g FROM f)))
    SELECT g, COUNT(*), SUM(v), AVG(v), quantile_cont(v, 0.5)
    FROM rows_kept JOIN pairs USING (u, g) WHERE k <= {shape.kappa} AND rank <= {shape.l0} GROUP BY g
    """
    return {g: [float(n), float(s), float(a), float(m)] for g, n, s, a, m in con.sql(sql).fetchall()}


def _errors(answers: list[Answer], truth: Answer, missing: tuple[str, ...] = ()) -> list[float | None]:
    """Per aggregate: the median relative error over categories and answers; None for ``missing`` ones."""
    out: list[float | None] = []
    for index, aggregate in enumerate(AGGREGATES):
        if aggregate in missing:
            out.append(None)
            continue
        errors = []
        for answer in answers:
            for category, exact in truth.items():
                value = answer.get(category, [0.0] * len(AGGREGATES))[index]
                value = 0.0 if value is None or value != value else value  # not released, or NaN
                true = float(exact[index] or 0.0)
                errors.append(abs(value - true) / max(abs(true), 1e-9))
        out.append(float(np.median(errors)))
    return out


def _run_child(name: str, job: Job, timeout: float, python: str) -> dict[str, Any]:
    command = [
        python, __file__, "--child", name, "--data", job.path, "--repeats", str(job.repeats),
        "--shape", job.shape.name, "--kakeibo-catalog", job.catalog,
        "--pipelinedp-bounds-share", str(job.bounds_share),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    if done.returncode != 0:
        error = (lines or [f"exit code {done.returncode}"])[-1].strip()
        return {"error": error if len(error) < 200 else error[:200] + "..."}
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            result: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            continue
        return result
    return {"error": "no result line on stdout"}


def _interpreter(name: str, args: argparse.Namespace) -> tuple[str | None, str]:
    """The interpreter a child runs in, or None and why it is skipped."""
    if name not in PEERS:
        return sys.executable, ""
    option, probe, _ = PEERS[name]
    given: str | None = getattr(args, option)
    if given:
        return given, ""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True)
    if done.returncode == 0:
        return sys.executable, ""
    return None, f"skipped: not installed here and no --{option.replace('_', '-')}"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def run_size(shape_name: str, rows: int, args: argparse.Namespace, tmp: str) -> dict[str, str]:
    shape = SHAPES[shape_name]
    path = str(Path(tmp) / f"{shape_name}_{rows}.parquet")
    pq.write_table(make_table(shape_name, rows), path)
    systems: list[tuple[str, str]] = [("load", ""), ("raw", ""), ("floor", "")]
    systems += [("kakeibo", variant) for variant in args.kakeibo_catalog]
    systems += [("spark", "handset")] if args.spark else []
    systems += [(name, "") for name in ("smartnoise", "pipelinedp", "pipelinedp-auto", "opendp")]
    selected = set(args.systems.split(",")) | {"load", "raw", "floor"}
    versions: dict[str, str] = {}
    results: list[tuple[str, str, dict[str, Any]]] = []
    for name, variant in systems:
        if name not in selected:
            continue
        python, why = _interpreter(name, args)
        peer_repeats = name in SLOW or name in ("opendp", "spark")
        repeats = args.peer_repeats if peer_repeats else args.repeats
        job = Job(path, shape, repeats, variant or "handset", args.pipelinedp_bounds_share)
        if name in SLOW and rows > args.skip_slow:
            result: dict[str, Any] = {"error": f"skipped above {args.skip_slow:,} rows (--skip-slow)"}
        elif python is None:
            result = {"error": why}
        else:
            result = _run_child(name, job, args.timeout, python)
            versions.update(result.get("versions", {}))
        results.append((name, variant, result))
    truth = next((r.get("answers", [None])[0] for n, _, r in results if n == "raw"), None)
    floor = next((r.get("seconds") for n, _, r in results if n == "floor"), None) or float("nan")
    print(
        f"\n# {shape_name}, {rows:,} rows; hand-set kappa={shape.kappa}, L0={shape.l0}, amount in "
        f"[{shape.lower:g}, {shape.upper:g}]; epsilon={EPSILON} per query; a process each"
    )
    header = " | ".join(f"{a} error" for a in AGGREGATES)
    print(f"| system | seconds | x floor | peak RSS MB | {header} | note |")
    print("|" + " --- |" * (6 + len(AGGREGATES) - 1))
    blank = " | ".join("" for _ in AGGREGATES)
    for name, variant, result in results:
        label = CHILDREN[name][0] + (f" (catalog {variant})" if name in ("kakeibo", "spark") else "")
        if "error" in result:
            print(f"| {label} | | | | {blank} | {result['error']} |")
            continue
        seconds = result["seconds"]
        timing = " | " if seconds != seconds else f"{seconds:.3f} | {seconds / floor:.1f}x"
        errors = blank
        if truth is not None and result["answers"] and name != "raw":
            errors = " | ".join(_fmt(e) for e in _errors(result["answers"], truth, MISSING.get(name, ())))
        note = result.get("note", "") if name != "raw" else "exact, unbounded: the reference"
        print(f"| {label} | {timing} | {result['peak_mb']:,.0f} | {errors} | {note} |")
    if truth is not None:
        errors = " | ".join(_fmt(e) for e in _errors([_bounding_alone(path, shape)], truth))
        print(f"| bounding alone (hand-set bounds, no noise) | | | | {errors} | random rows and groups |")
    return versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--shape", nargs="+", choices=sorted(SHAPES), default=["visits"])
    parser.add_argument("--spark", action="store_true", help="also run kakeibo on Spark local[2]")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the DuckDB and kakeibo rows")
    parser.add_argument("--peer-repeats", type=int, default=1, help="runs of the peers and Spark")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed per system and size")
    parser.add_argument(
        "--skip-slow",
        type=int,
        default=10**7,
        help="run PipelineDP and SmartNoise only up to this many rows",
    )
    parser.add_argument(
        "--systems",
        default=",".join(n for n in CHILDREN if n not in ("load", "raw", "floor")),
        help="comma-separated subset of the systems (the baselines always run)",
    )
    parser.add_argument(
        "--kakeibo-catalog",
        nargs="+",
        choices=CATALOG_VARIANTS,
        default=list(CATALOG_VARIANTS),
        help="kakeibo's catalog variants (see kakeibo_catalog); a child takes one",
    )
    parser.add_argument(
        "--pipelinedp-bounds-share",
        type=float,
        default=0.1,
        help="share of epsilon PipelineDP spends choosing L0 privately",
    )
    parser.add_argument("--pipelinedp-python", help="interpreter of an environment with pipeline-dp")
    parser.add_argument("--opendp-python", help="interpreter of an environment with opendp and polars 1.32")
    add_arguments(parser)
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.corpus:
        main_corpus(args)
        return
    if args.child:
        job = Job(
            args.data,
            SHAPES[args.shape[0]],
            args.repeats,
            args.kakeibo_catalog[0],
            args.pipelinedp_bounds_share,
        )
        seconds, answers, note = CHILDREN[args.child][1](job)
        print(
            json.dumps(
                {
                    "seconds": seconds,
                    "peak_mb": _peak_mb(),
                    "answers": answers,
                    "note": note,
                    "versions": _versions(args.child),
                }
            )
        )
        return
    if unknown := set(args.systems.split(",")) - set(CHILDREN):
        raise SystemExit(f"--systems: unknown {', '.join(sorted(unknown))} (known: {', '.join(CHILDREN)})")
    import bench_sql
    from kakeibo.sql import Catalog

    # the hand-set visits catalog here is issue 3's, bench_sql.CATALOG
    assert CATEGORIES == bench_sql.CATEGORIES
    handset = Catalog.from_dict(kakeibo_catalog(SHAPES["visits"], "handset"))
    assert handset.to_dict() == bench_sql.CATALOG.to_dict()
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shape:
            for rows in args.rows:
                versions.update(run_size(shape, rows, args, tmp))
    print("\nVersions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))


if __name__ == "__main__":
    main()
