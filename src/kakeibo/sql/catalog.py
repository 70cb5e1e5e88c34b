"""The catalog: what the data owner declares about each table before any analyst query runs.

For every table the catalog states the **privacy unit** (the column that identifies a person; omitted for
row-level privacy, where each row is a different person), how much one person may contribute after
bounding -- at most ``max_partitions`` groups (``L0``) and ``max_rows_per_partition`` rows in each group
(``kappa``; Wilson et al. 2020, "Differentially Private SQL with Bounded User Contribution"; seed 002,
slides 71-77) -- and per column its type, the clamping bounds that make sums and averages bounded, the
optional list of public GROUP BY keys, and whether its value is constant for each user (which makes
regions over that column disjoint per user, see :mod:`kakeibo.accounting.overlap`).

The neighbour relation the catalog declares is: *add or remove one privacy unit with all of its rows* (for a
row-level table: one row). Tables marked ``public = true`` hold non-sensitive data that may be JOINed
on a column declared ``unique``.

A sensitive table may instead **reference** another one: ``references = { o_custkey = "customer.c_custkey" }``
says that each row's ``o_custkey`` is a key of ``customer``, so the row belongs to the person its ``customer``
row belongs to. Following references from any table reaches a table that names its ``privacy_unit`` (the
table of persons); the neighbour relation then removes one person with every row that reaches them,
however many references away (the relation of R2T, Dong et al. SIGMOD 2022, and of ZetaSQL's privacy-unit
propagation). A referenced column must be its table's privacy unit or declared ``unique`` (kakeibo checks it
against the engine before a query joins on it; the neighbour relation ranges over databases that keep the
catalog's declarations), so each reference leads to exactly one person. A table may reference several
tables, or one table twice (a transfer's payer and payee, a friendship's two ends, a line item's order and
its supplier), and several tables may name a privacy unit (TPC-H's customer and supplier; a person is one
unit value of one of them): a row then belongs to every person its references reach, removing any of them
removes it, and a query over such rows is answered by R2T's linear program (:mod:`kakeibo.sql.program`).

A catalog is a TOML file or the same structure as a Python mapping::

    dialect = "tsql"                  # optional: the SQL dialect queries are written in (default duckdb)

    [tables.visits]
    privacy_unit = "user_id"          # omit for row-level privacy (each row is a person)
    max_partitions = 3
    max_rows_per_partition = 5
    source = "visits.parquet"         # optional: read by the DuckDB backend (relative to the TOML file)
    [tables.visits.columns]
    user_id  = { type = "int" }
    visit_id = { type = "int", unique = true }
    category = { type = "str", public_values = ["food", "rent"] }
    amount   = { type = "float", lower = 0, upper = 100 }
    age      = { type = "int", lower = 0, upper = 120, user_constant = true }
    [tables.visits.correlation]       # optional: users are correlated along this graph
    edges = "friends.csv"             # pairs of user_id values, optional weight (relative to the TOML file)
    tau = 1.0

    [tables.purchases]               # rows of the person a visit belongs to
    references = { visit_id = "visits.visit_id" }
    max_partitions = 2                # limits of a query whose rows are purchases (see below)
    max_rows_per_partition = 20
    [tables.purchases.columns]
    visit_id = "int"
    price    = { type = "float", lower = 0, upper = 500 }

    [tables.categories]
    public = true                     # no personal data: may be JOINed to a sensitive table
    [tables.categories.columns]
    category = { type = "str", unique = true }  # no value twice: a public table joins only on such keys
    label    = "str"

The limits of a query that joins tables along references are those of its *grain* table, the one whose
rows the join results are (the query's table that no other of its tables references): at most
``max_partitions`` groups per person, and in each group at most ``max_rows_per_partition`` join results.

A table with a privacy unit or a reference that leaves a limit out leaves it *undeclared*; kakeibo does
not guess it (a silent 1 once dropped most of a query's rows, and ``"auto"`` spends part of every query's
epsilon). A query that needs the missing limit is refused before any read, with a message that names it:
every query on persons' rows needs ``max_rows_per_partition``; ``max_partitions`` is needed only when one
person's rows can fall in several of the query's groups (an ungrouped query, or one grouped by
``user_constant`` columns, keeps one group per person). A row-level table needs neither (both are 1).

Nobody has to guess a limit or a clamping bound: ``max_rows_per_partition``, ``max_partitions`` (on a table
with a privacy unit or a reference) and a numeric column's ``lower = upper = "auto"`` are chosen privately
when a query runs, from noisy histograms of the rows it reads, at ``bounds_share`` (default
:data:`DEFAULT_SHARE`, 10%, the best of 10%, 20% and 30% in ``benchmarks/bench_bounds.py``) of the query's
epsilon; the rest goes to the answer, and the ledger is charged once for both (:mod:`kakeibo.sql.bounds`).
By default (``bound_selection = "ladder"``) a query of COUNTs and SUMs then truncates each person's *total*
in a group at thresholds chosen by a private scan near the bias-variance optimum, and measures what they
drop (:class:`~kakeibo.sql.truncation.Ladder`, :class:`~kakeibo.sql.truncation.Drop`);
``bound_selection = "histogram"`` keeps the histograms' row limits and clamping bounds for every query.
``max_rows_bound`` (default :data:`~kakeibo.sql.truncation.DEFAULT_BOUND`) is the largest
``max_rows_per_partition`` considered::

    [tables.visits]
    privacy_unit = "user_id"
    max_partitions = "auto"
    max_rows_per_partition = "auto"
    bounds_share = 0.1                # optional: the share of each query's epsilon spent on the choice
    [tables.visits.columns]
    amount = { type = "float", lower = "auto", upper = "auto" }

With ``bound_selection = "race"`` instead, ``max_rows_per_partition = "auto"`` (at a declared
``max_partitions``, with declared column bounds) truncates each person's total in each group by the R2T race
over thresholds ``M N / b^(K - j)``, ``j = 0 .. K = floor(log_b N)`` (``b`` the table's ``truncation_base``,
default :data:`~kakeibo.sql.truncation.DEFAULT_BASE`; ``N`` its ``max_rows_bound``; ``M`` the most one row
adds to the aggregate), from ``M N`` down (:mod:`kakeibo.sql.truncation`)::

    [tables.purchases]
    references = { visit_id = "visits.visit_id" }
    max_rows_per_partition = "auto"
    bound_selection = "race"
    max_rows_bound = 10000            # no person has more than 10,000 purchases in a group

Column types must be the engine's (``int``: any integer type, ``float``: REAL or DOUBLE, ``decimal`` with
its ``precision`` and ``scale``: DECIMAL(p, s) or PostgreSQL's numeric(p, s), ``str``, ``bool``, ``date``);
the session checks the columns a query reads against the engine's schema before it runs, since a mismatch
makes the engine convert the column row by row.

With a ``correlation`` section, SUM, COUNT and AVG on the table are calibrated against every Bayesian
adversary of the Gaussian correlation model on that graph; :mod:`kakeibo.sql.correlation` states the exact
neighbour relation, adversary model and what is refused.

A table may live in an engine schema of its own (``schema = "pums"``, issue 32): every statement reads it
there, and a query names it with that schema (SmartNoise's ``FROM PUMS.PUMS``) or without one.

A column may also be given by its type alone (``user_id = "int"``). Unknown keys are rejected, so a typo
in a privacy setting cannot pass silently. Table and column names are case-insensitive and stored in
lower case.
"""

from __future__ import annotations

import datetime
import math
import numbers
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast, get_args

from sqlglot import exp

from ..errors import ArgumentError, ArgumentTypeError, ConfigurationError, Error
from .correlation import CorrelationSpec
from .truncation import DEFAULT_BASE, DEFAULT_BOUND

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "HUGE",
    "PUBLIC_TABLE_KEYS",
    "TINY",
    "Catalog",
    "ColumnSpec",
    "ColumnType",
    "CorrelationSpec",
    "FrozenMap",
    "QueryRefused",
    "Reference",
    "TableSpec",
    "refuse_unknown_keys",
    "with_public_values",
]

ColumnType = Literal["int", "float", "str", "bool", "date", "decimal"]
_COLUMN_TYPES: tuple[str, ...] = get_args(ColumnType)
_NUMERIC = ("int", "float", "decimal")
#: the most digits a ``decimal`` column may have: every engine's DECIMAL holds 38 (PostgreSQL's ``numeric``
#: more, which a double cannot hold: ``CAST(x AS DOUBLE)`` of a larger value fails on its row)
MAX_DECIMAL_PRECISION = 38
#: the most days a date column's declared bounds may span: each day is a public key (issue 32)
MAX_DATE_DAYS = 10_000

#: the share of a query's epsilon spent choosing its "auto" limits and column bounds (:mod:`.bounds`)
DEFAULT_SHARE = 0.1

#: The magnitudes kakeibo's statements compute with. Every value an aggregate reads is clamped into its
#: bounds and then *flushed*: a magnitude below ``TINY`` becomes exactly 0. So every clamping bound is 0 or
#: of magnitude in ``[TINY, HUGE]`` (checked here, for the catalog's bounds, an analyst's ``bounds=`` and
#: an expression's derived bounds alike), and then no product, quotient, square or per-person sum the
#: statement computes can leave the double range or underflow to 0 (PostgreSQL fails on both):
#: :mod:`kakeibo.sql.values` gives the argument.
TINY = 1e-100
HUGE = 1e100

_V = TypeVar("_V")


class QueryRefused(Error, ValueError):  # noqa: N818 - the name says what happened to the query
    """A query kakeibo will not answer; ``reason`` says why in one sentence. Raised before any data is read.

    >>> str(QueryRefused("SELECT * would reveal individual rows."))
    'SELECT * would reveal individual rows.'
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SeveralPersons(QueryRefused):
    """A query whose join results can reference several persons (a self-join, a table with several
    references, sensitive tables joined other than along a reference): the per-person truncation of
    :mod:`kakeibo.sql.tables` does not bound it, R2T's linear program does (:mod:`kakeibo.sql.program`).
    The session answers such a query there; the reason is what the one-person analysis saw."""


class FrozenMap(Mapping[str, _V], Generic[_V]):
    """A read-only, hashable, picklable mapping (insertion-ordered), used for catalog lookups.

    >>> m = FrozenMap({"a": 1})
    >>> m["a"], dict(m), m == {"a": 1}
    (1, {'a': 1}, True)
    """

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[str, _V] | Iterable[tuple[str, _V]] = ()) -> None:
        self._data: dict[str, _V] = dict(items)

    def __getitem__(self, key: str) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (tuple(self._data.items()),))


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ArgumentTypeError(f"{what} must be a non-empty string, got {value!r}.")
    return value.lower()


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _public_value(column: str, kind: str, value: object) -> object:
    """Validate one public key against the column type (dates may be given as ISO text)."""
    if kind == "int" and isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if kind == "float" and _is_number(value) and math.isfinite(float(cast(float, value))):
        return float(cast(float, value))
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "date":
        if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
            return value
        if isinstance(value, str):
            try:
                return datetime.date.fromisoformat(value)
            except ValueError:
                pass
    raise ArgumentError(f"public value {value!r} of column {column!r} is not a valid {kind}.")


@dataclass(frozen=True)
class ColumnSpec:
    """One column of a catalog table.

    ``lower``/``upper`` are the clamping bounds (numeric columns only; both or neither): every value is
    clamped into ``[lower, upper]`` before it is summed, which bounds one row's contribution. Both
    ``"auto"`` (``auto_bounds``) lets each query choose them privately (:mod:`kakeibo.sql.bounds`); ``lower
    = 0, upper = "auto"`` declares the column never negative and lets the queries choose the rest (the
    spec keeps ``lower = 0``, ``upper = None``: :attr:`auto_lower`). Without
    them a column may be counted and grouped by, but not summed, averaged or used in a quantile.
    ``public_values`` lists GROUP BY keys that are public knowledge (no private partition selection is
    needed for them). ``user_constant`` declares that every row of one user has the same value. ``unique``
    declares that no two rows of a (public) table share a non-NULL value of the column, so an equi-join on
    it repeats no sensitive row; a public table is only joined on such a column (kakeibo checks the
    declaration against the engine before the join runs). ``bins`` is how many equal-width bins a view
    (:mod:`kakeibo.sql.views`) cuts ``[lower, upper]`` into.

    A ``decimal`` column (issue 32) is the engine's exact ``DECIMAL(precision, scale)`` (PostgreSQL's
    ``numeric(precision, scale)``), at most :data:`MAX_DECIMAL_PRECISION` digits: aggregates read it as the
    double nearest to each value (``CAST(c AS DOUBLE)``, finite for every such value), and a literal it is
    compared with is written exactly in its scale (:mod:`kakeibo.sql.predicates`).

    >>> ColumnSpec("price", "decimal", lower=0, upper=1e6, precision=15, scale=2).scale
    2

    A ``date`` column's ``lower`` and ``upper`` (ISO dates, issue 32) declare the range of its values:
    every day between them is a public key (``GROUP BY d`` and ``DATE_TRUNC('month', d)`` release all of
    them, empty ones included, with no private selection), and a row whose key is none of them is in no
    group (a week that starts before ``lower`` counts its days before it too).

    >>> len(ColumnSpec("day", "date", lower="2025-01-01", upper="2025-12-31").public_values)
    365

    >>> ColumnSpec("amount", "float", lower=0, upper=100)  # doctest: +NORMALIZE_WHITESPACE
    ColumnSpec(name='amount', type='float', lower=0.0, upper=100.0, public_values=None, user_constant=False,
               unique=False, auto_bounds=False)
    >>> ColumnSpec("amount", "float", lower=5)
    Traceback (most recent call last):
    ...
    kakeibo.errors.ArgumentError: column 'amount' needs both lower and upper bounds, or neither.
    """

    name: str
    type: ColumnType
    lower: float | None = None
    upper: float | None = None
    public_values: tuple[Any, ...] | None = None
    user_constant: bool = False
    unique: bool = False
    auto_bounds: bool = False
    # equal-width bins over [lower, upper] when a view discretises the column (kakeibo.sql.views); it
    # changes no query's answer, so it stays out of the repr that release ids digest
    bins: int | None = field(default=None, repr=False)
    # a decimal column's digits and digits after the point (None for every other type); out of the repr,
    # which older release ids digest: :attr:`digits` joins the digest of a decimal column's table
    precision: int | None = field(default=None, repr=False)
    scale: int | None = field(default=None, repr=False)
    # a date column's declared bounds (its public values are every day between them), for to_dict
    days: tuple[datetime.date, datetime.date] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        name = _check_name(self.name, "a column name")
        object.__setattr__(self, "name", name)
        if self.type not in _COLUMN_TYPES:
            raise ArgumentError(
                f"column {name!r} has type {self.type!r}; the types are {', '.join(_COLUMN_TYPES)}."
            )
        self._check_digits(name)
        auto = cast(object, self.lower) == "auto", cast(object, self.upper) == "auto"
        never_negative = auto == (False, True) and _is_number(self.lower) and self.lower == 0
        if auto[0] != auto[1] and not never_negative:
            raise ArgumentError(
                f'column {name!r} needs both bounds "auto", lower = 0 with upper = "auto" (a column never '
                "negative, whose upper bound is chosen), or neither."
            )
        if auto[1]:  # lower stays 0 for a column declared never negative (auto_lower)
            object.__setattr__(self, "auto_bounds", True)
            object.__setattr__(self, "lower", 0.0 if never_negative else None)
            object.__setattr__(self, "upper", None)
        for flag in ("user_constant", "unique", "auto_bounds"):
            if not isinstance(getattr(self, flag), bool):
                raise ArgumentTypeError(f"{flag} of column {name!r} must be true or false.")
        if (self.lower is None) != (self.upper is None) and not self.auto_bounds:
            raise ArgumentError(f"column {name!r} needs both lower and upper bounds, or neither.")
        if self.auto_bounds and self.type not in _NUMERIC:
            raise ArgumentError(
                f"column {name!r} has type {self.type}; only int, float and decimal columns take bounds."
            )
        if self.lower is not None and self.upper is not None and self.type == "date":
            self._date_bounds(name)
        if self.lower is not None and self.upper is not None:
            if self.type not in _NUMERIC:
                raise ArgumentError(
                    f"column {name!r} has type {self.type}; only int, float and decimal columns take bounds."
                )
            bounds: list[float] = []
            for side, value in (("lower", self.lower), ("upper", self.upper)):
                if not _is_number(value) or not math.isfinite(float(value)):
                    raise ArgumentError(
                        f"the {side} bound of column {name!r} must be a finite number, got {value!r}."
                    )
                if self.type == "int":
                    if not float(value).is_integer():
                        raise ArgumentError(
                            f"the {side} bound of int column {name!r} must be a whole number, got {value!r}."
                        )
                    bounds.append(int(value))
                else:
                    bounds.append(float(value))
            if bounds[0] > bounds[1]:
                raise ArgumentError(
                    f"column {name!r} has lower bound {self.lower} above its upper bound {self.upper}."
                )
            for side, bound in zip(("lower", "upper"), bounds, strict=True):
                if bound != 0 and not TINY <= abs(bound) <= HUGE:
                    raise ArgumentError(
                        f"the {side} bound of column {name!r} must be 0 or of magnitude between 1e-100 and "
                        f"1e100 (kakeibo computes with it in the engine), got {bound!r}."
                    )
            object.__setattr__(self, "lower", bounds[0])
            object.__setattr__(self, "upper", bounds[1])
        if self.bins is not None:
            if isinstance(self.bins, bool) or not isinstance(self.bins, int) or not 1 <= self.bins <= 2**16:
                raise ArgumentError(f"bins of column {name!r} must be a whole number from 1 to 65536.")
            if not self.bounded:
                raise ArgumentError(f"column {name!r} takes bins only with numeric lower and upper bounds.")
        if self.public_values is not None:
            if isinstance(self.public_values, (str, bytes)) or not isinstance(self.public_values, Iterable):
                raise ArgumentTypeError(f"public_values of column {name!r} must be a list of values.")
            values = tuple(_public_value(name, self.type, v) for v in self.public_values)
            if not values:
                raise ArgumentError(f"public_values of column {name!r} is empty; omit it instead.")
            if len(set(values)) != len(values):
                raise ArgumentError(f"public_values of column {name!r} lists a value twice.")
            object.__setattr__(self, "public_values", values)

    def _check_digits(self, name: str) -> None:
        """A decimal column's precision and scale; no other type has them."""
        if self.type != "decimal":
            if self.precision is not None or self.scale is not None:
                raise ArgumentError(
                    f"column {name!r} has type {self.type}; only decimal columns take digits."
                )
            return
        precision, scale = self.precision, self.scale
        whole = all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (precision, scale))
        if not whole or not 1 <= cast(int, precision) <= MAX_DECIMAL_PRECISION:
            raise ArgumentError(
                f"decimal column {name!r} needs a whole precision from 1 to {MAX_DECIMAL_PRECISION} and a "
                f"scale, as the engine declares it (DECIMAL(15, 2): precision = 15, scale = 2)."
            )
        if not 0 <= cast(int, scale) <= cast(int, precision):
            raise ArgumentError(f"the scale of decimal column {name!r} lies from 0 to its precision.")

    def _date_bounds(self, name: str) -> None:
        """A date column's bounds: every day from ``lower`` to ``upper`` is a public key (so GROUP BY the
        column, or a DATE_TRUNC of it, releases all of them with no private selection), kept in
        ``public_values``; a row whose key is none of them is in no group. ``lower`` and ``upper`` become
        ``None`` (a date is never clamped) and :attr:`days` keeps them."""
        ends = []
        for side, value in (("lower", self.lower), ("upper", self.upper)):
            try:
                ends.append(_public_value(name, "date", value))
            except ArgumentError:
                raise ArgumentError(
                    f"the {side} bound of date column {name!r} is a date (YYYY-MM-DD), got {value!r}."
                ) from None
        first, last = cast(list[datetime.date], ends)
        if self.public_values is not None and self.days is None:  # (days: derived from older bounds)
            raise ArgumentError(f"date column {name!r} declares bounds or public_values, not both.")
        if not first <= last or (last - first).days >= MAX_DATE_DAYS:
            raise ArgumentError(
                f"the bounds of date column {name!r} span from 1 to {MAX_DATE_DAYS:,} days in order, got "
                f"{first} to {last}."
            )
        days = tuple(first + datetime.timedelta(days=i) for i in range((last - first).days + 1))
        object.__setattr__(self, "public_values", days)
        object.__setattr__(self, "days", (first, last))
        object.__setattr__(self, "lower", None)
        object.__setattr__(self, "upper", None)

    @property
    def digits(self) -> tuple[int, int] | None:
        """A decimal column's ``(precision, scale)``; ``None`` for every other type."""
        return None if self.type != "decimal" else (cast(int, self.precision), cast(int, self.scale))

    @property
    def auto_lower(self) -> bool:
        """Whether the lower bound is chosen too (``"auto"``), not declared 0: the column may be negative."""
        return self.auto_bounds and self.lower is None

    @property
    def bounded(self) -> bool:
        """Whether the column has clamping bounds."""
        return self.lower is not None and self.upper is not None

    def to_dict(self) -> dict[str, Any]:
        """The catalog entry (inverse of the per-column part of :meth:`Catalog.from_dict`)."""
        out: dict[str, Any] = {"type": self.type}
        if self.type == "decimal":
            out["precision"], out["scale"] = self.precision, self.scale
        if self.auto_bounds:
            out["lower"], out["upper"] = "auto" if self.lower is None else 0, "auto"
        elif self.lower is not None:
            out["lower"], out["upper"] = self.lower, self.upper
        if self.days is not None:
            out["lower"], out["upper"] = (day.isoformat() for day in self.days)
        elif self.public_values is not None:
            out["public_values"] = list(self.public_values)
        if self.user_constant:
            out["user_constant"] = True
        if self.unique:
            out["unique"] = True
        if self.bins is not None:
            out["bins"] = self.bins
        return out


@dataclass(frozen=True)
class Reference:
    """A column of one sensitive table that holds a key of another: ``column`` of this table equals
    ``key`` of ``table`` (lower case), as a foreign key does.

    >>> Reference.parse("orders", "o_custkey", "Customer.C_CUSTKEY")
    Reference(column='o_custkey', table='customer', key='c_custkey')
    >>> Reference.parse("orders", "o_custkey", "customer")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kakeibo.errors.ArgumentError: the reference of orders.o_custkey must name a table and its column, \
as ...; got 'customer'.
    """

    column: str
    table: str
    key: str

    @classmethod
    def parse(cls, table: str, column: str, target: object) -> Reference:
        """``column = "table.key"`` of a catalog's ``references`` entry."""
        parts = target.split(".") if isinstance(target, str) else []
        if len(parts) != 2 or not all(part.strip() for part in parts):
            raise ArgumentError(
                f"the reference of {table}.{column} must name a table and its column, as "
                f'"customer.c_custkey"; got {target!r}.'
            )
        return cls(_check_name(column, "a column name"), parts[0].strip().lower(), parts[1].strip().lower())

    def __str__(self) -> str:
        return f"{self.column} -> {self.table}.{self.key}"


def _positive_int(table: str, key: str, value: object) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) < 1:
        raise ArgumentError(f"{key} of table {table!r} must be a positive integer, got {value!r}.")
    return int(value)


@dataclass(frozen=True)
class TableSpec:
    """One table of the catalog and the neighbour relation it declares.

    With ``privacy_unit`` set, neighbouring databases differ by one user (all rows with one value of that
    column), and the engine keeps at most ``max_rows_per_partition`` rows of a user per group and at most
    ``max_partitions`` groups per user. A limit left out (``None``) is *undeclared*: a query that needs it
    is refused, naming it (:func:`kakeibo.sql.analyze.declared_limits`), since no default serves every
    table. Without a privacy unit the table has row-level privacy: each row is a different person, so both
    limits are 1. A ``public`` table holds no personal data; it may only be
    JOINed to a sensitive table. ``source`` is a Parquet or CSV file the DuckDB backend reads as the table.
    ``correlation`` declares a graph over the privacy units (:mod:`kakeibo.sql.correlation`); it is read
    and checked here, so a bad edge file fails when the catalog loads. ``references`` (one
    :class:`Reference` per referencing column) says that the table's rows belong to the persons the
    referenced tables' rows belong to; such a table has no ``privacy_unit`` of its own, and its limits
    apply to queries whose join results
    are its rows (the :class:`Catalog` checks where its references lead).

    >>> columns = [ColumnSpec("user_id", "int"), ColumnSpec("amount", "float", lower=0, upper=100)]
    >>> visits = TableSpec(
    ...     "visits",
    ...     {c.name: c for c in columns},
    ...     privacy_unit="user_id",
    ...     max_partitions=3,
    ... )
    >>> visits.column("AMOUNT").upper, visits.max_rows_per_partition, visits.declared_limits
    (100.0, None, {'max_partitions': 3})
    >>> visits.column("height")
    Traceback (most recent call last):
    ...
    kakeibo.sql.catalog.QueryRefused: table visits has no column 'height'.
    """

    name: str
    columns: Mapping[str, ColumnSpec]
    privacy_unit: str | None = None
    max_partitions: int | Literal["auto"] | None = None
    max_rows_per_partition: int | Literal["auto"] | None = None
    public: bool = False
    source: str | None = None
    correlation: CorrelationSpec | None = None
    references: tuple[Reference, ...] = ()
    max_rows_bound: int = DEFAULT_BOUND
    truncation_base: float = DEFAULT_BASE
    bound_selection: Literal["histogram", "ladder", "race"] = "ladder"
    bounds_share: float = DEFAULT_SHARE
    # the engine schema the table lives in (issue 32: SmartNoise's ``PUMS.PUMS``); None: the default one
    schema: str | None = None

    def __post_init__(self) -> None:
        name = _check_name(self.name, "a table name")
        object.__setattr__(self, "name", name)
        if self.schema is not None:
            object.__setattr__(self, "schema", _check_name(self.schema, f"the schema of table {name!r}"))
            if self.source is not None:
                raise ArgumentError(
                    f"table {name!r} is loaded from {self.source}, into the engine's default schema; drop "
                    "its schema, or its source."
                )
        if not isinstance(self.columns, Mapping):
            raise ArgumentTypeError(
                f"the columns of table {name!r} must be a mapping from name to ColumnSpec."
            )
        if not self.columns:
            raise ArgumentError(f"table {name!r} declares no columns.")
        columns: dict[str, ColumnSpec] = {}
        for key, spec in self.columns.items():
            if not isinstance(spec, ColumnSpec):
                raise ArgumentTypeError(
                    f"column {key!r} of table {name!r} must be a ColumnSpec, got {spec!r}."
                )
            if _check_name(key, "a column name") != spec.name:
                raise ArgumentError(
                    f"column key {key!r} of table {name!r} does not match its name {spec.name!r}."
                )
            if spec.name in columns:
                raise ArgumentError(f"table {name!r} declares column {spec.name!r} twice.")
            columns[spec.name] = spec
        object.__setattr__(self, "columns", FrozenMap(columns))
        if not isinstance(self.public, bool):
            raise ArgumentTypeError(f"public of table {name!r} must be true or false.")
        if self.source is not None and (not isinstance(self.source, str) or not self.source):
            raise ArgumentTypeError(f"source of table {name!r} must be a file path, got {self.source!r}.")
        kappa = self._kappa()
        l0 = self._l0()
        object.__setattr__(self, "max_rows_per_partition", kappa)
        object.__setattr__(self, "max_partitions", l0)
        self._check_bound_selection()
        references = tuple(self.references)
        if not all(isinstance(r, Reference) for r in references):
            raise ArgumentTypeError(f"the references of table {name!r} must be Reference objects.")
        object.__setattr__(self, "references", references)
        if references:
            self._check_references(columns)
            return
        if self.privacy_unit is None:
            if kappa != 1 or l0 != 1:
                raise ArgumentError(
                    f"table {name!r} has row-level privacy (no privacy_unit), so each row is a person and "
                    "max_partitions and max_rows_per_partition must be 1."
                )
            if self.correlation is not None:
                raise ArgumentError(
                    f"table {name!r} declares a correlation graph but no privacy_unit; the graph's nodes are "
                    "privacy-unit values."
                )
            return
        if self.public:
            raise ArgumentError(f"table {name!r} is public, so it cannot have a privacy_unit.")
        unit = _check_name(self.privacy_unit, "privacy_unit")
        if unit not in columns:
            raise ArgumentError(f"the privacy_unit {unit!r} of table {name!r} is not one of its columns.")
        object.__setattr__(self, "privacy_unit", unit)
        if self.correlation is not None:
            if not isinstance(self.correlation, CorrelationSpec):
                raise ArgumentTypeError(f"correlation of table {name!r} must be a CorrelationSpec.")
            try:
                self.correlation.bound(columns[unit].type)
            except (OSError, ValueError) as error:
                raise ArgumentError(f"table {name!r}: {error}") from error

    def _kappa(self) -> int | Literal["auto"] | None:
        """``max_rows_per_partition`` checked, with ``max_rows_bound`` when it is ``"auto"``."""
        name = self.name
        if self.max_rows_per_partition is None and self.max_rows_bound == DEFAULT_BOUND:
            return 1 if self.row_level else None
        if self.max_rows_per_partition is None and len(self.references) > 1:
            # rows of several persons: the most join results one person reaches, R2T's GS (sql/program.py)
            object.__setattr__(
                self, "max_rows_bound", _positive_int(name, "max_rows_bound", self.max_rows_bound)
            )
            return None
        if self.max_rows_per_partition == "auto":
            if self.privacy_unit is None and not self.references:
                raise ArgumentError(
                    f'table {name!r} has row-level privacy, so max_rows_per_partition is 1, not "auto".'
                )
            object.__setattr__(
                self, "max_rows_bound", _positive_int(name, "max_rows_bound", self.max_rows_bound)
            )
            return "auto"
        if self.max_rows_bound != DEFAULT_BOUND:
            raise ArgumentError(
                f"max_rows_bound of table {name!r} bounds the choice of max_rows_per_partition = "
                '"auto" (or, on a table with several references, the join results one person reaches); the '
                "table sets a fixed limit."
            )
        return _positive_int(name, "max_rows_per_partition", self.max_rows_per_partition)

    def _l0(self) -> int | Literal["auto"] | None:
        """``max_partitions`` checked."""
        if self.max_partitions is None:
            return 1 if self.row_level else None
        if self.max_partitions != "auto":
            return _positive_int(self.name, "max_partitions", self.max_partitions)
        if self.privacy_unit is None and not self.references:
            raise ArgumentError(
                f'table {self.name!r} has row-level privacy, so max_partitions is 1, not "auto".'
            )
        return "auto"

    def _check_bound_selection(self) -> None:
        """``bound_selection``, ``bounds_share`` and ``truncation_base``: how the table's ``"auto"`` limits
        and column bounds are chosen (:mod:`kakeibo.sql.bounds`, :mod:`kakeibo.sql.truncation`)."""
        name = self.name
        if self.bound_selection not in ("histogram", "ladder", "race"):
            raise ArgumentError(
                f'bound_selection of table {name!r} is "histogram", "ladder" or "race", got '
                f"{self.bound_selection!r}."
            )
        share = self.bounds_share
        if not _is_number(share) or not 0 < float(share) < 1:
            raise ArgumentError(
                f"bounds_share of table {name!r} must lie strictly between 0 and 1, got {share!r}."
            )
        object.__setattr__(self, "bounds_share", float(share))
        if self.bound_selection != "race":
            if self.truncation_base != DEFAULT_BASE:
                raise ArgumentError(
                    f'truncation_base of table {name!r} sets the grid of bound_selection = "race"; the table '
                    "chooses its bounds by histogram."
                )
            return
        if self.max_rows_per_partition != "auto" or self.max_partitions in ("auto", None):
            raise ArgumentError(
                f'bound_selection = "race" on table {name!r} races max_rows_per_partition = "auto" at a '
                "fixed max_partitions; declare both so, or choose the bounds by histogram."
            )
        if any(column.auto_bounds for column in self.columns.values()):
            raise ArgumentError(
                f'table {name!r} races its limits (bound_selection = "race"), which chooses no column '
                "bounds; choose them by histogram, or declare them."
            )
        base = self.truncation_base
        if not _is_number(base) or not 1 < float(base) <= 1000:
            raise ArgumentError(
                f"truncation_base of table {name!r} must be a number in (1, 1000], got {base!r}."
            )
        object.__setattr__(self, "truncation_base", float(base))

    @property
    def auto_truncation(self) -> bool:
        """Whether the table's per-group contributions are truncated by the R2T race
        (:mod:`kakeibo.sql.truncation`), not at a fixed ``max_rows_per_partition``."""
        return self.bound_selection == "race"

    @property
    def chooses_bounds(self) -> bool:
        """Whether a query on the table first chooses some of its limits or column bounds privately from
        histograms (:mod:`kakeibo.sql.bounds`)."""
        return self.bound_selection in ("histogram", "ladder") and (
            "auto" in (self.max_rows_per_partition, self.max_partitions)
            or any(column.auto_bounds for column in self.columns.values())
        )

    def _check_references(self, columns: Mapping[str, ColumnSpec]) -> None:
        """What a table's references may be, seen from the table alone (:class:`Catalog` checks the rest)."""
        name = self.name
        if self.public:
            raise ArgumentError(f"table {name!r} is public, so it cannot reference a person's table.")
        if self.privacy_unit is not None:
            raise ArgumentError(
                f"table {name!r} names a privacy_unit and references another table; its person is found one "
                "way only: drop the privacy_unit, or the references."
            )
        if self.correlation is not None:
            raise ArgumentError(
                f"table {name!r} references another table, so its correlation graph belongs there."
            )
        for reference in self.references:
            if reference.column not in columns:
                raise ArgumentError(f"the reference {reference} of table {name!r} names no column of it.")

    @property
    def row_level(self) -> bool:
        """Whether each row is a different person (no privacy unit column, no reference to a person)."""
        return self.privacy_unit is None and not self.references

    @property
    def declared_limits(self) -> dict[str, int | Literal["auto"]]:
        """The contribution limits the table declares, by name. A table with a privacy unit or a reference
        that omits one leaves it *undeclared* (``None``): no value serves every query, so kakeibo does not
        guess one, and refuses a query that needs it (:func:`kakeibo.sql.analyze.analyze`)."""
        limits = (
            ("max_partitions", self.max_partitions),
            ("max_rows_per_partition", self.max_rows_per_partition),
        )
        return {name: value for name, value in limits if value is not None}

    @property
    def reference(self) -> Reference | None:
        """The table's reference, if it has exactly one; :class:`SeveralPersons` when it has several (its
        rows can belong to several persons)."""
        if len(self.references) > 1:
            raise SeveralPersons(
                f"each row of table {self.name} references {len(self.references)} persons' tables "
                f"({', '.join(str(r) for r in self.references)})."
            )
        return self.references[0] if self.references else None

    def has_column(self, name: str) -> bool:
        """Whether the table has a column called ``name`` (any case)."""
        return name.lower() in self.columns

    def column(self, name: str) -> ColumnSpec:
        """The column ``name`` (any case); :class:`QueryRefused` when the table has no such column."""
        try:
            return self.columns[name.lower()]
        except KeyError:
            raise QueryRefused(f"table {self.name} has no column {name.lower()!r}.") from None

    def engine_name(self, dialect: str = "duckdb") -> str:
        """The table as the engine statements name it, quoted, in ``dialect``: after its schema when the
        catalog declares one (a query may name it with or without that schema, :mod:`.tables`).

        >>> TableSpec("pums", {"age": ColumnSpec("age", "int")}, schema="PUMS").engine_name()
        '"pums"."pums"'
        """
        return exp.table_(self.name, db=self.schema, quoted=True).sql(dialect)

    def to_dict(self) -> dict[str, Any]:
        """The catalog entry of this table (inverse of :meth:`Catalog.from_dict` for one table)."""
        out: dict[str, Any] = {}
        if self.schema is not None:
            out["schema"] = self.schema
        if self.privacy_unit is not None:
            out["privacy_unit"] = self.privacy_unit
        if not self.row_level:
            out.update(self.declared_limits)
        if self.public:
            out["public"] = True
        if self.source is not None:
            out["source"] = self.source
        if self.correlation is not None:
            out["correlation"] = self.correlation.to_dict()
        if self.references:
            out["references"] = {r.column: f"{r.table}.{r.key}" for r in self.references}
        if self.max_rows_per_partition == "auto":
            out["max_rows_bound"] = self.max_rows_bound
        if self.auto_truncation:
            out["bound_selection"] = "race"
            out["truncation_base"] = self.truncation_base
        elif self.bound_selection == "histogram":
            out["bound_selection"] = "histogram"
        if self.chooses_bounds:
            out["bounds_share"] = self.bounds_share
        out["columns"] = {name: spec.to_dict() for name, spec in self.columns.items()}
        return out


_TABLE_KEYS = frozenset(
    {
        "schema",
        "privacy_unit",
        "max_partitions",
        "max_rows_per_partition",
        "public",
        "source",
        "columns",
        "correlation",
        "references",
        "max_rows_bound",
        "truncation_base",
        "bound_selection",
        "bounds_share",
    }
)
_CORRELATION_KEYS = frozenset({"edges", "tau"})
_COLUMN_KEYS = frozenset(
    {"type", "lower", "upper", "public_values", "user_constant", "unique", "bins", "precision", "scale"}
)


def refuse_unknown_keys(keys: Iterable[str], allowed: frozenset[str], where: str) -> None:
    """Refuse keys of a TOML table outside ``allowed``, with one wording in every file kakeibo reads (a typo
    in a privacy setting must not pass silently)."""
    found = set(keys)
    for key in found:
        if not isinstance(key, str):
            raise ArgumentTypeError(f"the keys of {where} must be names, got {key!r}.")
    extra = sorted(found - allowed)
    if extra:
        raise ArgumentError(
            f"unknown key(s) {', '.join(extra)} in {where}; the keys are {', '.join(sorted(allowed))}."
        )


def _column_from_dict(table: str, name: str, data: object) -> ColumnSpec:
    if isinstance(data, str):
        data = {"type": data}
    if not isinstance(data, Mapping):
        raise ArgumentTypeError(
            f"column {name!r} of table {table!r} must be a type name or a table of settings."
        )
    refuse_unknown_keys(data, _COLUMN_KEYS, f"column {table}.{name}")
    if "type" not in data:
        raise ArgumentError(f"column {name!r} of table {table!r} has no type.")
    public = data.get("public_values")
    return ColumnSpec(
        name,
        data["type"],
        lower=data.get("lower"),
        upper=data.get("upper"),
        public_values=None if public is None else tuple(public),
        user_constant=data.get("user_constant", False),
        unique=data.get("unique", False),
        bins=data.get("bins"),
        precision=data.get("precision"),
        scale=data.get("scale"),
    )


def _table_from_dict(name: str, data: object, base: Path | None) -> TableSpec:
    if not isinstance(data, Mapping):
        raise ArgumentTypeError(f"table {name!r} must be a table of settings.")
    refuse_unknown_keys(data, _TABLE_KEYS, f"table {name}")
    columns = data.get("columns")
    if not isinstance(columns, Mapping) or not columns:
        raise ArgumentError(
            f"table {name!r} needs a [tables.{name}.columns] section with at least one column."
        )
    return TableSpec(
        name,
        {key: _column_from_dict(name, key, spec) for key, spec in columns.items()},
        privacy_unit=data.get("privacy_unit"),
        max_partitions=data.get("max_partitions"),
        max_rows_per_partition=data.get("max_rows_per_partition"),
        public=data.get("public", False),
        source=_resolve(data.get("source"), base),
        correlation=_correlation_from_dict(name, data.get("correlation"), base),
        references=_references_from_dict(name, data.get("references")),
        max_rows_bound=data.get("max_rows_bound", DEFAULT_BOUND),
        truncation_base=data.get("truncation_base", DEFAULT_BASE),
        bound_selection=data.get("bound_selection", "ladder"),
        bounds_share=data.get("bounds_share", DEFAULT_SHARE),
        schema=data.get("schema"),
    )


def _references_from_dict(table: str, data: object) -> tuple[Reference, ...]:
    if data is None:
        return ()
    if not isinstance(data, Mapping) or not data:
        raise ArgumentTypeError(
            f'references of table {table!r} must be a table such as {{ o_custkey = "customer.c_custkey" }}.'
        )
    return tuple(Reference.parse(table, column, target) for column, target in data.items())


def _resolve(path: _V, base: Path | None) -> _V | str:
    """A relative file path taken relative to ``base`` (the TOML file's folder); anything else as it is."""
    if isinstance(path, str) and base is not None and "://" not in path and not os.path.isabs(path):
        return str(base / path)
    return path


def _correlation_from_dict(table: str, data: object, base: Path | None) -> CorrelationSpec | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ArgumentTypeError(f"correlation of table {table!r} must be a table with edges and tau.")
    refuse_unknown_keys(data, _CORRELATION_KEYS, f"table {table}.correlation")
    missing = sorted(_CORRELATION_KEYS - set(data))
    if missing:
        raise ArgumentError(f"correlation of table {table!r} needs {' and '.join(missing)}.")
    return CorrelationSpec(_resolve(data["edges"], base), tau=data["tau"])


#: the SQL dialects a query may be written in (sqlglot's names); :mod:`kakeibo.sql` loads each at import
DIALECTS = ("duckdb", "postgres", "tsql", "bigquery", "spark", "mysql", "sqlite", "snowflake")


class Catalog:
    """The tables an analyst may query, with their privacy units, contribution limits and column bounds,
    and the SQL dialect its queries are written in when it names one (a top-level ``dialect = "tsql"``:
    a session reads queries in it unless it or the query names another).

    >>> catalog = Catalog.from_toml('''
    ... [tables.visits]
    ... privacy_unit = "user_id"
    ... max_partitions = 3
    ... max_rows_per_partition = 5
    ... [tables.visits.columns]
    ... user_id = { type = "int" }
    ... category = { type = "str" }
    ... amount = { type = "float", lower = 0, upper = 100 }
    ... ''')
    >>> t = catalog.table("Visits")
    >>> t.privacy_unit, t.max_partitions, t.max_rows_per_partition, t.column("amount").upper
    ('user_id', 3, 5, 100.0)
    >>> list(catalog.tables)
    ['visits']
    """

    tables: Mapping[str, TableSpec]
    dialect: str | None

    def __init__(self, tables: Iterable[TableSpec], *, dialect: str | None = None) -> None:
        if dialect is not None and (not isinstance(dialect, str) or dialect.lower() not in DIALECTS):
            raise ArgumentError(
                f"the catalog's dialect {dialect!r} is not one of {', '.join(DIALECTS)}; omit it to read "
                "queries as DuckDB's SQL."
            )
        self.dialect = None if dialect is None else dialect.lower()
        found: dict[str, TableSpec] = {}
        if not isinstance(tables, Iterable):
            raise ArgumentTypeError(f"a Catalog holds TableSpec objects, got {tables!r}.")
        for table in tables:
            if not isinstance(table, TableSpec):
                raise ArgumentTypeError(f"a Catalog holds TableSpec objects, got {table!r}.")
            if table.name in found:
                raise ArgumentError(f"the catalog declares table {table.name!r} twice.")
            found[table.name] = table
        self.tables = FrozenMap(found)
        for table in found.values():
            self.person_paths(table.name)  # every chain of references is checked when the catalog loads
            self._check_correlated(table)

    def _check_correlated(self, table: TableSpec) -> None:
        """Refuse, when the catalog loads, what only the R2T race or a view would use on a table whose
        persons are correlated: both calibrate their noise for independent persons, so on such a table they
        would release at the plain scale where seed 001's eq. 26 needs ``(1 + l*)`` times more (issue 29, R3
        and R8). Queries and views refuse the same again, before any read."""
        if any(len(self.tables[t].references) > 1 for t in self._reached(table.name)):
            return  # answered by R2T's program only, which refuses correlated persons per query
        person = self.person(table.name)
        if person is None or person.correlation is None:
            return
        if table.auto_truncation:
            raise ConfigurationError(
                f'table {table.name!r} races its limits (bound_selection = "race"), but the persons of table '
                f"{person.name!r} are correlated and the race calibrates for independent persons; declare a "
                "fixed max_rows_per_partition instead (COUNT, SUM and AVG are then calibrated to the "
                "correlation)."
            )
        binned = sorted(name for name, column in table.columns.items() if column.bins is not None)
        if table is person and binned:
            raise ConfigurationError(
                f"column {binned[0]!r} of table {table.name!r} declares the bins of a view, but views are "
                "not built on a table whose persons are correlated (their noise is calibrated for "
                "independent persons); drop bins and ask COUNT, SUM or AVG queries instead, which are "
                "calibrated to the correlation."
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: str | os.PathLike[str] | None = None) -> Catalog:
        """Build a catalog from the parsed TOML structure ``{"tables": {name: {...}}}``.

        Relative ``source`` paths are resolved against ``base_dir`` when it is given.

        >>> cat = Catalog.from_dict({"tables": {"people": {"columns": {"age": {"type": "int"}}}}})
        >>> cat.table("people").row_level
        True
        """
        if not isinstance(data, Mapping):
            raise ArgumentTypeError("a catalog must be a mapping with a 'tables' entry.")
        refuse_unknown_keys(data, frozenset({"tables", "dialect"}), "the catalog")
        tables = data.get("tables")
        if not isinstance(tables, Mapping) or not tables:
            raise ArgumentError("the catalog declares no tables; add a [tables.NAME] section.")
        base = None if base_dir is None else Path(base_dir)
        return cls(
            (_table_from_dict(name, spec, base) for name, spec in tables.items()), dialect=data.get("dialect")
        )

    @classmethod
    def from_toml(cls, path_or_text: str | os.PathLike[str]) -> Catalog:
        """Load a catalog from a ``.toml`` file or from TOML text.

        A :class:`os.PathLike`, or a one-line string naming an existing file or ending in ``.toml``, is
        read as a file (and relative ``source`` paths inside it are taken relative to that file);
        anything else is parsed as TOML text.
        """
        if not isinstance(path_or_text, (str, os.PathLike)):
            raise ArgumentTypeError(f"a catalog is a path or TOML text, got {type(path_or_text).__name__}.")
        base_dir: Path | None = None
        try:
            if isinstance(path_or_text, str) and not _looks_like_path(path_or_text):
                data = tomllib.loads(path_or_text)
            else:
                path = Path(path_or_text)
                with path.open("rb") as handle:
                    data = tomllib.load(handle)
                base_dir = path.resolve().parent
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:  # ValueErrors both, kept as a base
            raise ConfigurationError(f"the catalog is not valid TOML: {error}") from error
        return cls.from_dict(data, base_dir=base_dir)

    def table(self, name: str) -> TableSpec:
        """The table ``name`` (any case); :class:`QueryRefused` when the catalog has no such table."""
        try:
            return self.tables[name.lower()]
        except KeyError:
            known = ", ".join(self.tables)
            raise QueryRefused(f"unknown table {name.lower()!r}; the catalog has: {known}.") from None

    def chain(self, name: str) -> tuple[Reference, ...]:
        """The references from table ``name`` to the table of its persons (empty for that table itself, a
        row-level table and a public one); :class:`ValueError` when the catalog's references do not lead to
        one (an unknown table or column, a key that is not unique, a cycle).

        >>> catalog = Catalog.from_dict({"tables": {
        ...     "customer": {"privacy_unit": "id", "columns": {"id": {"type": "int", "unique": True}}},
        ...     "orders": {"references": {"customer_id": "customer.id"},
        ...                "columns": {"key": {"type": "int", "unique": True}, "customer_id": "int"}},
        ...     "items": {"references": {"order_key": "orders.key"}, "columns": {"order_key": "int"}}}})
        >>> [str(r) for r in catalog.chain("items")], catalog.person("items").name
        (['order_key -> orders.key', 'customer_id -> customer.id'], 'customer')
        """
        table = self.tables[name.lower()]
        path: list[Reference] = []
        while (reference := table.reference) is not None:  # SeveralPersons where a table has several
            path.append(reference)
            table = self._step(table, reference, [name.lower(), *(r.table for r in path[:-1])])
        return tuple(path)

    def person_paths(self, name: str) -> tuple[tuple[Reference, ...], ...]:
        """Every chain of references from table ``name`` to a table of persons: one per person a row
        reaches (one for a table with at most one reference along its chain; none for a table of persons,
        a row-level or a public table), each checked as :meth:`chain` checks its one.

        >>> catalog = Catalog.from_dict({"tables": {
        ...     "people": {"privacy_unit": "id", "columns": {"id": "int"}},
        ...     "transfers": {"references": {"payer": "people.id", "payee": "people.id"},
        ...                   "columns": {"payer": "int", "payee": "int"}}}})
        >>> [[str(r) for r in path] for path in catalog.person_paths("transfers")]
        [['payer -> people.id'], ['payee -> people.id']]
        """

        def walk(table: TableSpec, seen: list[str]) -> list[tuple[Reference, ...]]:
            if not table.references:
                return []
            found: list[tuple[Reference, ...]] = []
            for reference in table.references:
                target = self._step(table, reference, seen)
                rest = walk(target, [*seen, target.name])
                found.extend([(reference, *r) for r in rest] if target.references else [(reference,)])
            return found

        return tuple(walk(self.tables[name.lower()], [name.lower()]))

    def _reached(self, name: str) -> list[str]:
        """The tables a row of table ``name`` leads to along references, itself first."""
        reached = [name.lower()]
        for path in self.person_paths(name):
            reached.extend(r.table for r in path if r.table not in reached)
        return reached

    def _step(self, table: TableSpec, reference: Reference, seen: list[str]) -> TableSpec:
        """The table ``reference`` of ``table`` leads to, checked (``seen``: the tables the chain passed
        through); at a table without references, it must name a privacy unit."""
        where = f"the reference {reference} of table {table.name!r}"
        target = self.tables.get(reference.table)
        if target is None:
            raise ArgumentError(f"{where} names no table of the catalog.")
        if target.public:
            raise ArgumentError(
                f"{where} leads to the public table {target.name}; references lead to the tables of "
                "persons (join public tables in queries instead)."
            )
        if reference.key not in target.columns:
            raise ArgumentError(f"{where} names no column of table {target.name}.")
        key = target.columns[reference.key]
        if not (key.unique or reference.key == target.privacy_unit):
            raise ArgumentError(
                f"{where} names a column that is neither the privacy unit of {target.name} nor declared "
                "unique there, so a row could reach several people."
            )
        if key.type != table.columns[reference.column].type:
            raise ArgumentError(
                f"{where} compares a {table.columns[reference.column].type} column with a {key.type} "
                "one; a join on it would convert values row by row."
            )
        if target.name in seen:
            raise ArgumentError(f"the references of tables {', '.join(seen)} form a cycle.")
        if not target.references and target.privacy_unit is None:
            raise ArgumentError(
                f"the references of table {seen[0]!r} lead to table {target.name}, which names no "
                "privacy_unit; declare it there (the column that identifies a person)."
            )
        return target

    def person(self, name: str) -> TableSpec | None:
        """The table of the persons the rows of table ``name`` belong to (the table itself when it names a
        privacy unit), or ``None`` for a row-level or public table."""
        chain = self.chain(name)
        table = self.tables[chain[-1].table] if chain else self.tables[name.lower()]
        return table if table.privacy_unit is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The catalog as the structure :meth:`from_dict` reads (and TOML holds)."""
        tables = {"tables": {name: table.to_dict() for name, table in self.tables.items()}}
        return tables if self.dialect is None else {"dialect": self.dialect, **tables}

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Catalog)
            and dict(self.tables) == dict(other.tables)
            and self.dialect == other.dialect
        )

    def __hash__(self) -> int:
        return hash((self.tables, self.dialect))

    def __repr__(self) -> str:
        dialect = "" if self.dialect is None else f", dialect={self.dialect!r}"
        return f"Catalog(tables={list(self.tables)}{dialect})"


#: the most values a public table's grouping column may hold to be released as public keys
#: (:func:`with_public_values`; more go through partition selection)
PUBLIC_TABLE_KEYS = 10_000


def person_columns(catalog: Catalog) -> frozenset[str]:
    """The names of the columns that name a person: each privacy unit, and each reference to one.

    >>> tables = {"t": {"privacy_unit": "uid", "columns": {"uid": "int"}}}
    >>> person_columns(Catalog.from_dict({"tables": tables}))
    frozenset({'uid'})
    """
    tables = catalog.tables.values()
    units = {(t.name, t.privacy_unit) for t in tables if t.privacy_unit is not None}
    return frozenset(
        {unit for _, unit in units}
        | {r.column for t in tables for r in t.references if (r.table, r.key) in units}
    )


def with_public_values(catalog: Catalog, values: Mapping[tuple[str, str], tuple[Any, ...]]) -> Catalog:
    """``catalog`` with the columns ``(table, column)`` of ``values`` listing them as their public values:
    the values of a public table's column, which are public by construction (issue 32). Checked as the
    catalog checks declared ones."""
    tables = {name: catalog.table(name) for name in catalog.tables}
    for (table, column), listed in values.items():
        spec = tables[table]
        columns = dict(spec.columns)
        columns[column] = replace(columns[column], public_values=listed)
        tables[table] = replace(spec, columns=columns)
    return Catalog(tables.values(), dialect=catalog.dialect)


def _looks_like_path(text: str) -> bool:
    if "\n" in text:
        return False
    return text.lower().endswith(".toml") or os.path.isfile(text)
