"""BigQuery's and ZetaSQL's differential-privacy syntax, read onto the catalog's limits (issue 32; seed
002, slide 77).

A query written for BigQuery or ZetaSQL names its privacy parameters in the query itself::

    SELECT WITH DIFFERENTIAL_PRIVACY
        OPTIONS (epsilon = 1, delta = 1e-5, max_groups_contributed = 2, privacy_unit_column = id)
      item, COUNT(*, contribution_bounds_per_group => (0, 5)) AS n,
      SUM(quantity, contribution_bounds_per_group => (0, 100)) AS total
    FROM professors GROUP BY item

or, in ZetaSQL's older form, ``SELECT WITH ANONYMIZATION OPTIONS (epsilon = 1, delta = 1e-5, kappa = 2)``
with ``ANON_COUNT``, ``ANON_SUM``, ``ANON_AVG``, ``ANON_VAR_POP``, ``ANON_STDDEV_POP`` and
``ANON_PERCENTILE_CONT``, each bounded by ``CLAMPED BETWEEN lower AND upper``. sqlglot parses neither, so
:func:`read_clause` reads the clause and each call's bounds from sqlglot's tokens (a string literal or a
quoted name that spells them is one token, never read), removes them, and hands the rest, read as
BigQuery SQL, to the analyser like any query. What they say maps onto kakeibo's model:

===============================================================  ============================================
written                                                          kakeibo
===============================================================  ============================================
``epsilon``, ``delta``                                           the query's epsilon and delta (given also as
                                                                 keywords, they must be equal)
``privacy_unit_column``                                          must name the privacy unit the catalog
                                                                 declares for the person the query reads
``max_groups_contributed``, ``kappa``                            ``max_partitions`` (L0)
``COUNT(*, contribution_bounds_per_group => (0, k))``,           ``max_rows_per_partition`` = k (kappa)
``ANON_COUNT(* CLAMPED BETWEEN 0 AND k)`` (also of a column)
``SUM(x, contribution_bounds_per_group => (0, t))``,             each person's total of ``x`` in a group
``ANON_SUM(x CLAMPED BETWEEN 0 AND t)``                          truncated at t, its values clamped to
                                                                 ``[0, t]`` (``totals`` of
                                                                 :func:`~kakeibo.sql.plan.plan_query`)
``AVG(x, contribution_bounds_per_group => (a, b))``, every       ``x``'s clamping bounds ``(a, b)``
``contribution_bounds_per_row => (a, b)``, ``ANON_AVG``,
``ANON_VAR_POP``, ``ANON_STDDEV_POP`` and
``ANON_PERCENTILE_CONT`` ``CLAMPED BETWEEN a AND b``
===============================================================  ============================================

Where kakeibo's meaning differs, it says so here: BigQuery's AVG averages the persons' own averages, while
kakeibo's averages the rows it keeps (at most kappa per person and group); a SUM's per-group bounds must
start at 0, since kakeibo truncates a person's total from above only (a negative lower bound would be read
as a clamp of the total that kakeibo does not compute). A limit the clause leaves out is the catalog's, and
one the catalog declares ``"auto"`` is chosen privately, as BigQuery computes bounds it is not given.

A bound the owner declared is never widened: a limit above the catalog's, a clamping bound outside the
column's declared ones, or a SUM's threshold above what the declared limits allow a person (kappa times
the column's upper bound) is refused with a sentence, as is an option kakeibo does not know, a clause
anywhere but the outermost SELECT, and two calls that bound one column differently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from sqlglot.dialects.bigquery import BigQuery
from sqlglot.errors import TokenError
from sqlglot.tokenizer_core import Token, TokenType

from .bounds import LIMITS, column_of, with_bounds
from .catalog import Catalog, QueryRefused, TableSpec

if TYPE_CHECKING:
    from .options import QueryOptions
    from .shape import AnalyzedQuery

__all__ = ["CallBound", "DPClause", "read_clause"]

#: the clause's two spellings: BigQuery's and ZetaSQL's current one, and ZetaSQL's older one
_SYNTAXES = ("DIFFERENTIAL_PRIVACY", "ANONYMIZATION")
#: each syntax's options, by lower-case name, and the kakeibo setting each one sets
_OPTIONS = {
    "DIFFERENTIAL_PRIVACY": {
        "epsilon": "epsilon",
        "delta": "delta",
        "privacy_unit_column": "privacy_unit",
        "max_groups_contributed": "max_groups",
    },
    "ANONYMIZATION": {
        "epsilon": "epsilon",
        "delta": "delta",
        "kappa": "max_groups",
        "max_groups_contributed": "max_groups",
    },
}
#: ZetaSQL's ANON_ functions kakeibo answers, by the name they are answered as
_ANON = {
    "ANON_COUNT": "COUNT",
    "ANON_SUM": "SUM",
    "ANON_AVG": "AVG",
    "ANON_VAR_POP": "VAR_POP",
    "ANON_STDDEV_POP": "STDDEV_POP",
    "ANON_PERCENTILE_CONT": "PERCENTILE_CONT",
}
_NAMED_BOUNDS = ("contribution_bounds_per_group", "contribution_bounds_per_row")
_NUMBER_TOKENS = frozenset({TokenType.NUMBER, TokenType.DASH, TokenType.PLUS, TokenType.DOT})


@dataclass(frozen=True)
class CallBound:
    """The bounds one aggregate call gives: ``function`` (as answered: ``COUNT``, ``SUM``, ...), the
    ``column`` it reads (lower case, as written: ``quantity`` or ``t.quantity``; ``None`` for ``*``),
    ``per_group`` (bounds of a person's contribution to a group, BigQuery's ``per_group`` and every
    ``CLAMPED BETWEEN`` but ANON_VAR_POP's, ANON_STDDEV_POP's and ANON_PERCENTILE_CONT's) or per row, and
    the bounds ``low`` and ``high``."""

    function: str
    column: str | None
    per_group: bool
    low: Fraction
    high: Fraction

    @property
    def written(self) -> str:
        """The bound as the query wrote it, for a refusal."""
        kind = "contribution_bounds_per_group" if self.per_group else "contribution_bounds_per_row"
        return f"{self.function}({self.column or '*'}, {kind} => ({_shown(self.low)}, {_shown(self.high)}))"


@dataclass(frozen=True)
class DPClause:
    """What a ``WITH DIFFERENTIAL_PRIVACY`` or ``WITH ANONYMIZATION`` clause and its calls' bounds say
    (:func:`read_clause`)."""

    syntax: str
    epsilon: Fraction | None
    delta: Fraction | None
    privacy_unit: str | None
    max_groups: int | None
    bounds: tuple[CallBound, ...]

    def options(self, options: QueryOptions) -> QueryOptions:
        """``options`` with the clause's epsilon, delta and dialect (BigQuery's, unless the caller named
        one), refused where the caller's keywords say otherwise."""
        for name in ("epsilon", "delta"):
            given, written = getattr(options, name), getattr(self, name)
            if given is not None and written is not None and float(given) != float(written):
                raise QueryRefused(
                    f"the query's OPTIONS give {name} = {_shown(written)} but the call gives {name}={given}; "
                    "give it once."
                )
        if self.epsilon is not None and options.accuracy is not None:
            raise QueryRefused("the query's OPTIONS give epsilon and the call gives accuracy=; give one.")
        return replace(
            options,
            epsilon=options.epsilon if self.epsilon is None else self.epsilon,
            delta=options.delta if self.delta is None else self.delta,
            dialect=options.dialect or "bigquery",
            clause=self,
        )

    def applied(
        self, catalog: Catalog, query: AnalyzedQuery, bounds: Mapping[str, object] | None
    ) -> tuple[Catalog, dict[str, float]]:
        """``catalog`` with the clause's limits and column bounds for ``query`` (analysed without limits),
        and the SUMs' thresholds by column; ``bounds`` are the caller's own overrides, which may not name
        what the clause bounds."""
        self._check_unit(query)
        overrides: dict[str, object] = {}
        totals: dict[str, float] = {}
        grain = catalog.table(query.grain.name) if query.grain is not None else None
        if self.max_groups is not None and query.user_level:  # a row is one person in one group already
            overrides["max_partitions"] = self._limit(grain, "max_partitions", self.max_groups, "groups")
        for bound in self.bounds:
            if bound.function == "COUNT" and bound.per_group:
                if bound.low != 0 or bound.high.denominator != 1 or bound.high < 1:
                    raise QueryRefused(
                        f"{bound.written} bounds a person's rows in a group: write (0, k), k whole and >= 1."
                    )
                rows = self._limit(grain, "max_rows_per_partition", int(bound.high), "rows")
                if query.user_level:  # a row-level person has one row
                    _set(overrides, "max_rows_per_partition", rows, bound)
            elif bound.column is None:
                raise QueryRefused(f"{bound.written} bounds no column; bound a column, or COUNT's rows.")
            elif bound.function == "SUM" and bound.per_group:
                table, column = column_of(query, bound.column)
                spec = catalog.table(table).columns[column]
                totals[column] = self._threshold(grain, bound, spec.upper)
                low = 0.0 if spec.lower is None or spec.auto_bounds else max(0.0, float(spec.lower))
                high = totals[column] if spec.upper is None or spec.auto_bounds else float(spec.upper)
                _set(overrides, f"{table}.{column}", (low, min(high, totals[column])), bound)
            else:
                table, column = column_of(query, bound.column)
                spec = catalog.table(table).columns[column]
                lower, upper = spec.lower, spec.upper
                declared = not spec.auto_bounds and lower is not None and upper is not None
                if declared and not lower <= bound.low <= bound.high <= upper:  # type: ignore[operator]
                    raise QueryRefused(
                        f"{bound.written} would widen the bounds [{lower}, {upper}] the catalog declares for "
                        f"{column}; bound it within them."
                    )
                _set(overrides, f"{table}.{column}", (float(bound.low), float(bound.high)), bound)
        for key in bounds or {}:
            if _key(key) in {_key(k) for k in overrides}:
                raise QueryRefused(f"bounds= and the query's clause both bound {key}; give it once.")
        merged = {**dict(bounds or {}), **overrides}
        return (with_bounds(catalog, query, merged) if merged else catalog), totals

    def _check_unit(self, query: AnalyzedQuery) -> None:
        """Refuse a ``privacy_unit_column`` other than the catalog's person's."""
        if self.privacy_unit is None:
            return
        if query.unit is None:
            raise QueryRefused(
                f"privacy_unit_column = {self.privacy_unit} names a privacy unit, but each row of "
                f"{query.table.name} is a person (the catalog declares no privacy unit); drop it."
            )
        qualifier, _, column = self.privacy_unit.rpartition(".")
        person = query.person.name if query.person is not None else query.unit[0]
        if column != query.unit[1] or qualifier not in ("", query.unit[0], person):
            raise QueryRefused(
                f"privacy_unit_column = {self.privacy_unit}, but the catalog's privacy unit of this query is "
                f"{person}.{query.unit[1]}; name it, or leave the option out."
            )

    def _limit(self, grain: TableSpec | None, name: str, value: int, what: str) -> int:
        """A limit the clause sets, refused above the one the catalog declares (``"auto"`` or undeclared:
        the clause's)."""
        declared = getattr(grain, name, None)
        if value < 1:
            raise QueryRefused(f"{name} from the query's clause must be at least 1, got {value}.")
        if isinstance(declared, int) and value > declared:
            raise QueryRefused(
                f"the query's clause allows {_shown(Fraction(value))} {what} per person where the catalog "
                f"declares {name} = "
                f"{declared}; a query may narrow the owner's limits, not widen them."
            )
        return value

    def _threshold(self, grain: TableSpec | None, bound: CallBound, upper: object) -> float:
        """The threshold at which a SUM's per-group bounds truncate each person's total, refused above what
        the catalog's declared limits allow one person in a group (``grain``'s kappa rows of at most the
        column's declared ``upper``)."""
        if bound.low != 0 or not bound.high > 0:
            raise QueryRefused(
                f"{bound.written}: a SUM's per-group bounds are (0, t) with t > 0 here, since kakeibo "
                "truncates each person's total from above only; bound its rows with "
                "contribution_bounds_per_row instead."
            )
        kappa = getattr(grain, "max_rows_per_partition", None)
        if isinstance(kappa, int) and isinstance(upper, (int, float)) and not isinstance(upper, bool):
            most = kappa * max(float(upper), 0.0)
            if bound.high > most:
                raise QueryRefused(
                    f"{bound.written} would let a person add {_shown(bound.high)} to a group, more than the "
                    f"catalog's limits allow ({kappa} rows of at most {upper}); bound it by at most {most:g}."
                )
        return float(bound.high)


def read_clause(query: str, options: QueryOptions) -> tuple[str, QueryOptions]:
    """``query`` without its ``WITH DIFFERENTIAL_PRIVACY`` or ``WITH ANONYMIZATION`` clause and its calls'
    bounds, and ``options`` with what they say (:meth:`DPClause.options`); a query without the clause comes
    back as it is. The bounds are checked against the catalog when the query is planned
    (:meth:`DPClause.applied`)."""
    if not isinstance(query, str):  # the analyser refuses it (ArgumentTypeError)
        return query, options
    try:
        tokens = BigQuery().tokenize(query)
    except TokenError:
        return query, options  # not BigQuery's lexicon: the analyser reports what is wrong
    start = _clause_start(tokens)
    if start is None:
        return query, options
    syntax = tokens[start + 2].text.upper()
    close = _closing(tokens, start + 4)
    settings = _read_options(query, syntax, tokens[start + 5 : close])
    cuts: list[tuple[int, int, str]] = [(tokens[start + 1].start, tokens[close].end + 1, "")]
    bounds = _read_calls(query, syntax, tokens, close + 1, cuts)
    text = query
    for begin, end, replacement in sorted(cuts, reverse=True):
        text = text[:begin] + replacement + text[end:]
    clause = DPClause(syntax, bounds=tuple(bounds), **settings)  # type: ignore[arg-type]
    return text, clause.options(options)


def _clause_start(tokens: Sequence[Token]) -> int | None:
    """The index of the SELECT that opens the clause, refused anywhere but the outermost SELECT."""
    depth, found = 0, None
    for i, token in enumerate(tokens):
        depth += (token.token_type == TokenType.L_PAREN) - (token.token_type == TokenType.R_PAREN)
        if (
            token.token_type == TokenType.SELECT
            and i + 4 < len(tokens)
            and tokens[i + 1].token_type == TokenType.WITH
            and tokens[i + 2].text.upper() in _SYNTAXES
        ):
            if depth != 0 or found is not None:
                raise QueryRefused(
                    f"WITH {tokens[i + 2].text.upper()} belongs to the outermost SELECT, once; an inner "
                    "query reads rows, and the outer one releases them."
                )
            if tokens[i + 3].text.upper() != "OPTIONS" or tokens[i + 4].token_type != TokenType.L_PAREN:
                raise QueryRefused(f"write WITH {tokens[i + 2].text.upper()} OPTIONS (epsilon = ..., ...).")
            found = i
    return found


def _closing(tokens: Sequence[Token], opening: int) -> int:
    """The index of the parenthesis that closes the one at ``opening``."""
    depth = 0
    for i in range(opening, len(tokens)):
        depth += (tokens[i].token_type == TokenType.L_PAREN) - (tokens[i].token_type == TokenType.R_PAREN)
        if depth == 0:
            return i
    raise QueryRefused("a parenthesis of the query is not closed.")


def _items(tokens: Sequence[Token]) -> list[list[Token]]:
    """``tokens`` split at the commas outside parentheses."""
    items: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        depth += (token.token_type == TokenType.L_PAREN) - (token.token_type == TokenType.R_PAREN)
        if token.token_type == TokenType.COMMA and depth == 0:
            items.append([])
        else:
            items[-1].append(token)
    return items


def _text(query: str, tokens: Sequence[Token]) -> str:
    return query[tokens[0].start : tokens[-1].end + 1] if tokens else ""


def _read_options(query: str, syntax: str, tokens: Sequence[Token]) -> dict[str, object]:
    """The clause's settings (``epsilon``, ``delta``, ``privacy_unit``, ``max_groups``) from its OPTIONS."""
    known = _OPTIONS[syntax]
    settings: dict[str, object] = dict.fromkeys(("epsilon", "delta", "privacy_unit", "max_groups"))
    seen: set[str] = set()
    for item in _items(tokens) if tokens else []:
        if len(item) < 3 or item[1].token_type != TokenType.EQ:
            raise QueryRefused(f"OPTIONS holds name = value pairs; {_text(query, item)!r} is not one.")
        name, value = item[0].text.lower(), item[2:]
        if name not in known:
            raise QueryRefused(
                f"WITH {syntax} takes the options {', '.join(known)} here; {name} is not one of them."
            )
        if name in seen:
            raise QueryRefused(f"OPTIONS gives {name} twice.")
        seen.add(name)
        setting = known[name]
        if setting == "privacy_unit":
            if not all(t.token_type in (TokenType.VAR, TokenType.DOT) for t in value):
                raise QueryRefused(f"privacy_unit_column names a column; got {_text(query, value)!r}.")
            settings[setting] = "".join(t.text for t in value).lower()
        elif setting == "max_groups":
            number = _number(query, value, name)
            if number.denominator != 1 or number < 1:
                raise QueryRefused(f"{name} is a whole number of groups of at least 1, got {_shown(number)}.")
            settings[setting] = int(number)
        else:
            settings[setting] = _number(query, value, name)
    return settings


def _read_calls(
    query: str, syntax: str, tokens: Sequence[Token], start: int, cuts: list[tuple[int, int, str]]
) -> list[CallBound]:
    """Each call's bounds after the clause (from ``start``), with the text to cut or rename in ``cuts``."""
    bounds: list[CallBound] = []
    for i in range(start, len(tokens) - 1):
        name = tokens[i].text.upper()
        if tokens[i + 1].token_type != TokenType.L_PAREN or tokens[i].token_type == TokenType.L_PAREN:
            continue
        if name.startswith("ANON_"):
            if syntax != "ANONYMIZATION" or name not in _ANON:
                raise QueryRefused(
                    f"{name} is answered in a WITH ANONYMIZATION query as one of {', '.join(_ANON)}"
                    + (
                        " (ANON_QUANTILES returns an array: ask ANON_PERCENTILE_CONT per quantile)."
                        if name == "ANON_QUANTILES"
                        else "."
                    )
                )
            cuts.append((tokens[i].start, tokens[i].end + 1, _ANON[name]))
            name = _ANON[name]
        close = _closing(tokens, i + 1)
        arguments = _items(tokens[i + 2 : close])
        bound = _named_bound(query, name, arguments, cuts) or _clamped(query, name, arguments, cuts)
        if bound is not None:
            bounds.append(bound)
    return bounds


def _named_bound(
    query: str, function: str, arguments: list[list[Token]], cuts: list[tuple[int, int, str]]
) -> CallBound | None:
    """BigQuery's ``contribution_bounds_per_group => (low, high)`` (or ``_per_row``), the call's last
    argument, if it has one."""
    last = arguments[-1]
    if len(arguments) < 2 or not last or last[0].text.lower() not in _NAMED_BOUNDS:
        return None
    if len(last) < 3 or last[1].token_type != TokenType.FARROW or last[2].token_type != TokenType.L_PAREN:
        raise QueryRefused(f"write {last[0].text} => (lower, upper); got {_text(query, last)!r}.")
    pair = _items(last[3:-1])
    if len(pair) != 2 or last[-1].token_type != TokenType.R_PAREN:
        raise QueryRefused(f"{last[0].text} takes a pair (lower, upper); got {_text(query, last)!r}.")
    previous = arguments[-2][-1]
    cuts.append((previous.end + 1, last[-1].end + 1, ""))
    low, high = (_number(query, side, last[0].text) for side in pair)
    return _bound(query, function, arguments[0], last[0].text.lower().endswith("group"), low, high)


def _clamped(
    query: str, function: str, arguments: list[list[Token]], cuts: list[tuple[int, int, str]]
) -> CallBound | None:
    """ZetaSQL's ``CLAMPED BETWEEN low AND high`` at the end of the call's arguments, if it has it."""
    last = arguments[-1]
    at = next((k for k, t in enumerate(last) if t.text.upper() == "CLAMPED"), None)
    if at is None:
        return None
    rest = last[at + 1 :]
    ands = [k for k, t in enumerate(rest) if t.token_type == TokenType.AND]
    if not rest or rest[0].token_type != TokenType.BETWEEN or len(ands) != 1:
        raise QueryRefused(f"write CLAMPED BETWEEN lower AND upper; got {_text(query, last[at:])!r}.")
    low = _number(query, rest[1 : ands[0]], "CLAMPED BETWEEN")
    high = _number(query, rest[ands[0] + 1 :], "CLAMPED BETWEEN")
    cuts.append((last[at].start, last[-1].end + 1, ""))
    arguments[-1] = last[:at]
    per_row = function in ("VAR_POP", "STDDEV_POP", "PERCENTILE_CONT")  # ZetaSQL: per entity's values
    return _bound(query, function, arguments[0], not per_row, low, high)


def _bound(
    query: str, function: str, argument: list[Token], per_group: bool, low: Fraction, high: Fraction
) -> CallBound:
    if low > high:
        raise QueryRefused(f"the bounds of {function} are (lower, upper) with lower <= upper.")
    if [t.token_type for t in argument] == [TokenType.STAR]:
        column = None
    elif argument and all(t.token_type in (TokenType.VAR, TokenType.DOT) for t in argument):
        column = "".join(t.text for t in argument).lower()
    else:
        raise QueryRefused(
            f"contribution bounds apply to a column or COUNT(*) here; {_text(query, argument)!r} is neither."
        )
    return CallBound(function, column, per_group, low, high)


def _number(query: str, tokens: Sequence[Token], name: str) -> Fraction:
    """A number literal (signed, ``.01``, ``1e-5``) as an exact fraction."""
    text = _text(query, tokens)
    if not tokens or any(t.token_type not in _NUMBER_TOKENS for t in tokens):
        raise QueryRefused(f"{name} is a number, got {text!r}.")
    try:
        return Fraction("".join(t.text for t in tokens))
    except (ValueError, ZeroDivisionError):
        raise QueryRefused(f"{name} is a number, got {text!r}.") from None


def _set(overrides: dict[str, object], key: str, value: object, bound: CallBound) -> None:
    """One override, refused when two calls set it differently."""
    if key in overrides and overrides[key] != value:
        raise QueryRefused(
            f"{bound.written} bounds {key} otherwise than another call of the query; bound it once."
        )
    overrides[key] = value


def _key(key: str) -> str:
    """A bounds key compared without its table (``t.amount`` and ``amount`` bound one column)."""
    return key.lower().rpartition(".")[2] if key not in LIMITS else key


def _shown(value: Fraction) -> str:
    """A bound as a refusal writes it: a whole number in full up to 15 digits, else as ``1e+308``."""
    return str(value.numerator) if value.denominator == 1 and abs(value) < 10**15 else f"{float(value):g}"
