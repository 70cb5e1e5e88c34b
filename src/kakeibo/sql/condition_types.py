"""WHERE and HAVING: what a filter may contain, and the column types its literals are checked against.

WHERE runs inside the engine before contributions are bounded, so any deterministic predicate over the
query's tables is a stable filter (one record in or out changes its output by at most that record); its
columns have their catalog types. ``random()`` and friends are refused: they would tie the released rows to
the engine's (not cryptographic) generator and make answers irreproducible; subqueries would read other
data, and functions sqlglot does not know cannot be checked. HAVING acts on the released (noisy) values
only, so it may name output columns only, typed as released: noisy counts are integers, every other
aggregate a double. Both follow the totality rules of :mod:`kakeibo.sql.predicates`.
"""

from __future__ import annotations

from typing import cast

from sqlglot import exp

from .aggregate_calls import is_aggregate
from .catalog import QueryRefused
from .outputs import Outputs, computed
from .predicates import COMPARISONS, TotalPredicate, strip
from .tables import ColumnRef, Tables, lower_name, sql_text

__all__ = ["having_condition", "where_condition"]

_NONDETERMINISTIC = (exp.Rand, exp.Randn, exp.Randstr, exp.Uuid)
_NONDETERMINISTIC_NAMES = frozenset({"random", "setseed", "nextval", "currval", "gen_random_uuid", "uuid"})


def where_condition(select: exp.Select, tables: Tables) -> exp.Expression | None:
    """The checked WHERE predicate of ``select`` with lower-case, quoted identifiers, qualified by table
    when the query has a join."""
    where = select.args.get("where")
    if where is None:
        return None
    predicate = where.this
    for node in predicate.walk():
        if is_aggregate(node):
            raise QueryRefused(
                "aggregates are not allowed in WHERE; filter released results with HAVING on an "
                "output column."
            )
        _scalar(node, "WHERE", tables.dialect)
    return tables.engine_condition("WHERE", predicate)


def having_condition(select: exp.Select, outputs: Outputs) -> exp.Expression | None:
    """The checked HAVING predicate of ``select`` over output names only (aggregates written in it replaced
    by the output column of the same aggregate)."""
    having = select.args.get("having")
    if having is None:
        return None
    dialect = outputs.dialect
    for node in having.this.walk():
        _deterministic(node, "HAVING", dialect)

    def lift(node: exp.Expr) -> exp.Expr:
        """A comparison's computed operand (``n * 100 / 2``), or a text key compared with numbers
        (``sex = 1``, read as ``CAST(sex AS DOUBLE) = 1``), as the hidden column kakeibo computes it in."""
        if isinstance(node, (*COMPARISONS, exp.Between, exp.In, exp.Is)):
            text_key = _text_key_against_numbers(node, outputs)
            for key in ("this", "expression", "low", "high"):
                operand = node.args.get(key)
                if not isinstance(operand, exp.Expr):
                    continue
                if operand is text_key and text_key is not None:
                    node.set(key, exp.column(outputs.term(exp.cast(text_key.copy(), "DOUBLE"), "HAVING")))
                elif computed(operand) and not _engine_operand(operand):
                    node.set(key, exp.column(outputs.term(operand, "HAVING")))
        return node

    terms = {t.alias for t in outputs.terms}
    lifted = having.this.copy().transform(lift)
    terms = {t.alias for t in outputs.terms} - terms

    def rewrite(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and node.name in terms:
            return exp.column(node.name, quoted=True)
        if is_aggregate(node) or isinstance(node, exp.Column):
            name = outputs.name(node, "HAVING")
            if name is None:
                raise QueryRefused(
                    f"HAVING can only filter on output columns ({', '.join(outputs.output)}), and "
                    f"{sql_text(node, dialect)} is not one."
                )
            return exp.column(name, quoted=True)
        return node

    rewritten = cast(exp.Expression, lifted.transform(rewrite))
    for node in rewritten.walk():
        _scalar(node, "HAVING", dialect)
    types = outputs.output_types()
    declared = {  # a key's public values convert literals of another type
        alias: ref.column.public_values
        for ref, alias in zip(outputs.group_refs, outputs.group_aliases, strict=True)
        if isinstance(ref, ColumnRef)
    }
    return TotalPredicate("HAVING", lambda c: types[c.name], dialect, lambda c: declared.get(c.name)).check(
        rewritten
    )


def _text_key_against_numbers(node: exp.Expr, outputs: Outputs) -> exp.Column | None:
    """The operand of HAVING's comparison, BETWEEN or IN ``node`` that names a text grouping key when every
    other operand is a number literal, else None.

    Such a key is compared as a number: kakeibo parses each released key (a decimal numeral, else NULL:
    :mod:`kakeibo.sql.derived`), so the engine converts nothing and the comparison is post-processing on
    released keys. A key whose public values are plain numerals reads the same way: its released keys are
    those numerals, so this agrees with WHERE's reading of the literal as one of them
    (:mod:`kakeibo.sql.predicates`)."""
    if isinstance(node, exp.In) and {k for k, v in node.args.items() if v} != {"this", "expressions"}:
        return None  # a subquery or UNNEST: refused by the checks after
    operands = [node.args.get(k) for k in ("this", "expression", "low", "high")] + list(
        node.expressions if isinstance(node, exp.In) else []
    )
    present = [o for o in operands if isinstance(o, exp.Expr)]
    columns = [o for o in present if isinstance(o, exp.Column)]
    numbers = all(o is columns[0] or _number_literal(o) for o in present) if len(columns) == 1 else False
    if len(present) < 2 or not numbers:
        return None
    name = outputs.name(columns[0], "HAVING")
    return columns[0] if name is not None and outputs.output_types()[name] == "str" else None


def _number_literal(node: exp.Expr) -> bool:
    """A number literal, possibly negated."""
    node = strip(node)
    if isinstance(node, exp.Neg):
        node = strip(node.this)
    return isinstance(node, exp.Literal) and not node.is_string


def _engine_operand(operand: exp.Expr) -> bool:
    """An operand the predicate checker reads as it is: LOWER or UPPER of a text column."""
    return isinstance(strip(operand), (exp.Lower, exp.Upper))


def _scalar(node: exp.Expr, clause: str, dialect: str) -> None:
    """Refuse what a filter may not contain: randomness, unknown functions, star expansions."""
    _deterministic(node, clause, dialect)
    if isinstance(node, exp.Anonymous):
        raise QueryRefused(
            f"the function {lower_name(node.this)}() is unknown to kakeibo's query checker, so it "
            f"cannot be used in {clause}."
        )
    if isinstance(node, (exp.Star, exp.Columns)):
        raise QueryRefused(f"* and COLUMNS(...) are not supported in {clause}; name the columns.")


def _deterministic(node: exp.Expr, clause: str, dialect: str) -> None:
    if isinstance(node, _NONDETERMINISTIC) or (
        isinstance(node, exp.Anonymous) and lower_name(node.this) in _NONDETERMINISTIC_NAMES
    ):
        raise QueryRefused(
            f"{sql_text(node, dialect)} is non-deterministic and is not allowed in {clause}; "
            "filters must give the same rows every time."
        )
