"""The released table: the SELECT list, GROUP BY, output names, ORDER BY and LIMIT.

The SELECT list holds grouping keys (plain columns, or expressions over columns that GROUP BY lists:
:mod:`kakeibo.sql.group_keys`), aggregates (:mod:`kakeibo.sql.aggregate_calls`) and expressions around
aggregates (:mod:`kakeibo.sql.derived`: post-processing of the released aggregates, each aggregate inside
released once, as a hidden output when it is not selected on its own). Raw rows
(``SELECT *``, a column that is neither grouped nor aggregated) would publish records, and grouping by the
privacy unit would publish per-person values. ORDER BY and LIMIT act on the released (noisy) values only,
so they may name output columns only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from .aggregate_calls import (
    SUPPORTED_AGGREGATES,
    AggregateCall,
    AggregateReader,
    contains_aggregate,
    is_aggregate,
)
from .aggregates import AGGREGATES
from .catalog import QueryRefused
from .derived import Derived, check_expression, check_term
from .group_keys import group_expression
from .predicates import numeric_literal, strip
from .shape import Aggregate, GroupExpression
from .tables import ColumnRef, Tables, lower_name, sql_text

__all__ = ["DerivedCall", "GroupKey", "Outputs", "SelectItem", "computed", "key_type", "limit"]


@dataclass(frozen=True)
class DerivedCall:
    """An expression around aggregates: ``expression`` with the i-th aggregate replaced by a column
    ``__input_<i>``, and ``calls`` the aggregates in that order."""

    expression: exp.Expr
    calls: tuple[AggregateCall, ...]


@dataclass(frozen=True)
class _Unkeyable:
    """A SELECT expression over columns that cannot be a GROUP BY key, and why (raised if it is used as
    one)."""

    reason: QueryRefused


#: a GROUP BY key: a catalog column, or an expression over columns
GroupKey = ColumnRef | GroupExpression
#: a SELECT item: (its alias, the grouping key, aggregate or expression of aggregates, its expression)
SelectItem = tuple[str | None, GroupKey | _Unkeyable | AggregateCall | DerivedCall, exp.Expr]


class Outputs:
    """The SELECT list and GROUP BY of ``select``, checked, and the output name of each column.

    ``group_refs`` are the grouping keys in GROUP BY order, ``group_aliases`` their output names,
    ``aggregates`` the named aggregates and ``output`` the output names in SELECT order.
    """

    def __init__(self, select: exp.Select, tables: Tables, reader: AggregateReader) -> None:
        self.tables = tables
        self.reader = reader
        self.dialect = tables.dialect
        self.items = self._select_items(select)
        self.group_refs = self._group_by(select)
        self.derived: tuple[Derived, ...] = ()
        self.terms: tuple[Derived, ...] = ()  # HAVING operands and ORDER BY items computed from outputs
        self._taken: set[str] = set()  # output names, hidden ones included
        self.group_aliases, self.aggregates, self.output = self._names()

    # -- SELECT list ----------------------------------------------------------------------------------

    def _select_items(self, select: exp.Select) -> list[SelectItem]:
        """Each SELECT item as (alias, grouping-column reference or aggregate, the expression)."""
        items: list[SelectItem] = []
        for expression in select.expressions:
            alias: str | None = None
            inner = expression
            if isinstance(expression, exp.Alias):
                alias = lower_name(expression.args.get("alias")) or None
                inner = expression.this
            inner = strip(inner)
            if isinstance(inner, exp.Star) or (
                isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star)
            ):
                raise QueryRefused(
                    "SELECT * would return individual rows; select aggregates such as COUNT(*) or "
                    "AVG(column), grouped by columns."
                )
            if isinstance(inner, exp.Columns):
                raise QueryRefused(
                    "COLUMNS(...) would return individual rows; name the aggregates one by one."
                )
            if isinstance(inner, exp.Column):
                items.append((alias, self.tables.resolve(inner), inner))
            elif is_aggregate(inner):
                items.append((alias, self.reader.read(inner), inner))
            elif contains_aggregate(inner):
                items.append((alias, self._derived(inner), inner))
            elif isinstance(inner, exp.Anonymous):
                raise QueryRefused(
                    f"the function {self.reader.typed_name(inner)} is not supported; use "
                    f"{SUPPORTED_AGGREGATES}."
                )
            elif any(isinstance(n, exp.Column) for n in inner.walk()):  # a key if GROUP BY lists it
                try:
                    items.append((alias, group_expression(inner, self.tables), inner))
                except QueryRefused as reason:
                    items.append((alias, _Unkeyable(reason), inner))
            else:  # a constant: evaluated like an expression around no aggregate
                items.append((alias, DerivedCall(inner.copy(), ()), inner))
        return items

    def _derived(self, inner: exp.Expr) -> DerivedCall:
        """Read each aggregate of an expression around aggregates (outermost first) and put a placeholder
        column in its place."""
        calls: list[AggregateCall] = []

        def replace(node: exp.Expr) -> exp.Expr:
            if is_aggregate(node):
                calls.append(self.reader.read(node))
                return exp.column(f"__input_{len(calls) - 1}")
            return node

        return DerivedCall(inner.copy().transform(replace), tuple(calls))

    # -- GROUP BY -------------------------------------------------------------------------------------

    def _group_by(self, select: exp.Select) -> list[GroupKey]:
        group = select.args.get("group")
        refs: list[GroupKey] = []
        if group is not None:
            for key in ("grouping_sets", "cube", "rollup", "totals"):
                if group.args.get(key):
                    raise QueryRefused(
                        "GROUPING SETS, ROLLUP and CUBE are not supported; run one query per grouping."
                    )
            if group.args.get("all"):
                refs = [kind for _, kind, _ in self.items if isinstance(kind, (ColumnRef, GroupExpression))]
            for expression in group.expressions:
                if isinstance(expression, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                    raise QueryRefused(
                        "GROUPING SETS, ROLLUP and CUBE are not supported; run one query per grouping."
                    )
                refs.append(self._group_item(expression))
        seen: set[tuple[str, str]] = set()
        for ref in refs:
            if ref.key in seen:
                raise QueryRefused(f"GROUP BY lists {_key_text(ref)} twice.")
            seen.add(ref.key)
            if isinstance(ref, ColumnRef) and not ref.source.spec.public:
                if self.tables.is_unit(ref):
                    raise QueryRefused(
                        f"grouping by the privacy unit {ref.column.name} would release one group per user; "
                        "group by other columns."
                    )
                if ref.column.type in ("float", "decimal") and ref.column.public_values is None:
                    declare = " or declare public_values" if ref.column.type == "float" else ""
                    raise QueryRefused(
                        f"grouping by the {ref.column.type} column {ref.column.name} is not supported, since "
                        f"nearly every value would be its own group; group by a coarser column{declare}."
                    )
        selected: set[tuple[str, str]] = set()
        grouped_columns = {ref.column.name for ref in refs if isinstance(ref, ColumnRef)}
        for alias, kind, expression in self.items:
            if not isinstance(kind, (ColumnRef, GroupExpression, _Unkeyable)):
                continue
            if isinstance(kind, ColumnRef) and kind.key not in seen:
                raise QueryRefused(
                    f"selecting {sql_text(expression, self.dialect)} without aggregating it would reveal "
                    "individual rows; add it to GROUP BY or wrap it in an aggregate such as COUNT or AVG."
                )
            if isinstance(kind, _Unkeyable) or kind.key not in seen:
                shadowed = (
                    f" (GROUP BY {alias} names the column {alias}, which takes precedence over the output "
                    "name, as in SQL; choose another alias)"
                    if alias in grouped_columns
                    else ""
                )
                raise QueryRefused(
                    f"the output {sql_text(expression, self.dialect)} is an expression over columns, "
                    "released only as a GROUP BY key: add it to GROUP BY (a CASE WHEN, or arithmetic over "
                    f"one int column with bounds) or wrap it in an aggregate{shadowed}."
                )
            if kind.key in selected:
                raise QueryRefused(f"the grouping key {_key_text(kind)} is selected twice.")
            selected.add(kind.key)
        reads = [
            k
            for _, k, _ in self.items
            if isinstance(k, AggregateCall) or (isinstance(k, DerivedCall) and k.calls)
        ]
        if not reads and not refs:  # GROUP BY without an aggregate releases the keys alone
            raise QueryRefused(
                "the query computes no aggregate; kakeibo releases aggregates or the keys of a GROUP BY, so "
                "add one such as COUNT(*)."
            )
        return refs

    def _group_item(self, expression: exp.Expr) -> GroupKey:
        node = strip(expression)
        text = sql_text(node, self.dialect)
        if isinstance(node, exp.Literal) and not node.is_string:
            position = numeric_literal(node)
            if position is None or position.denominator != 1 or not 1 <= position <= len(self.items):
                raise QueryRefused(f"GROUP BY {text} does not name a column of the SELECT list.")
            return self._selected_key(text, self.items[int(position) - 1][1])
        if isinstance(node, exp.Column):
            name = node.name.lower()
            if not node.args.get("table") and not any(s.spec.has_column(name) for s in self.tables.sources):
                for alias, kind, _ in self.items:
                    if alias == name:
                        return self._selected_key(name, kind)
            return self.tables.resolve(node)
        if contains_aggregate(node):
            raise QueryRefused(
                f"GROUP BY {text} groups by an aggregate; group by columns or expressions over them."
            )
        if node.find(exp.Column) is None:
            raise QueryRefused(
                f"GROUP BY {text} names no column and would put every row in one group; drop it."
            )
        return group_expression(node, self.tables)

    @staticmethod
    def _selected_key(text: str, kind: object) -> GroupKey:
        """The grouping key a GROUP BY position or alias names in the SELECT list."""
        if isinstance(kind, (ColumnRef, GroupExpression)):
            return kind
        if isinstance(kind, _Unkeyable):
            raise kind.reason
        raise QueryRefused(
            f"GROUP BY {text} refers to an aggregate; group by columns or expressions over them."
        )

    # -- output names ---------------------------------------------------------------------------------

    def _names(self) -> tuple[tuple[str, ...], tuple[Aggregate, ...], tuple[str, ...]]:
        names: list[str | None] = []
        taken = self._taken
        for alias, kind, _ in self.items:
            name = alias if alias is not None else (kind.column.name if isinstance(kind, ColumnRef) else None)
            if name is None and isinstance(kind, GroupExpression):
                name = self._unique("key")
            if name is not None:
                if name in taken:
                    raise QueryRefused(
                        f"the output name {name!r} is used twice; give each output column its own alias."
                    )
                taken.add(name)
            names.append(name)
        selected = {kind.key for _, kind, _ in self.items if isinstance(kind, (ColumnRef, GroupExpression))}
        for ref in self.group_refs:
            if not isinstance(ref, ColumnRef):
                continue
            if ref.key not in selected and ref.column.name in taken:
                raise QueryRefused(
                    f"the output name {ref.column.name!r} is also a grouping column that is not selected; "
                    "choose another alias."
                )
            taken.add(ref.column.name)

        unique = self._unique
        aggregates: list[Aggregate] = []
        for i, (_, kind, _) in enumerate(self.items):
            if isinstance(kind, AggregateCall):
                name = names[i] = names[i] or unique(kind.base_name)
                aggregates.append(Aggregate(name, kind.function, kind.column, kind.quantile, kind.sample))
        derived: list[Derived] = []
        for i, (_, kind, expression) in enumerate(self.items):
            if isinstance(kind, DerivedCall):
                name = names[i] = names[i] or unique("expr")
                derived.append(self._derived_output(name, kind, expression, aggregates, unique))
        self.derived = tuple(derived)
        group_aliases = []
        for ref in self.group_refs:
            selected_as = [
                names[i]
                for i, (_, kind, _) in enumerate(self.items)
                if isinstance(kind, (ColumnRef, GroupExpression)) and kind.key == ref.key
            ]
            if selected_as and selected_as[0] is not None:
                group_aliases.append(selected_as[0])
            else:  # a key GROUP BY lists and SELECT does not: released too, as every grouping column is
                group_aliases.append(ref.column.name if isinstance(ref, ColumnRef) else unique("key"))
        output = tuple(name for name in names if name is not None)
        return tuple(group_aliases), tuple(aggregates), output

    def _unique(self, base: str) -> str:
        """``base``, or ``base_2``, ``base_3``... : an output name not taken yet (then taken)."""
        name, suffix = base, 2
        while name in self._taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        self._taken.add(name)
        return name

    def _derived_output(
        self,
        name: str,
        kind: DerivedCall,
        expression: exp.Expr,
        aggregates: list[Aggregate],
        unique: Callable[[str], str],
    ) -> Derived:
        """The output ``name`` computed from aggregates: each aggregate inside is read as released when it
        is selected on its own, else added to ``aggregates`` as a hidden output (released and charged, not
        shown)."""
        inputs: list[str] = []
        for call in kind.calls:
            found = next((a.alias for a in aggregates if _identity(a) == call.identity), None)
            if found is None:
                found = unique(f"__{call.base_name}")
                aggregates.append(Aggregate(found, call.function, call.column, call.quantile, call.sample))
            inputs.append(found)

        def place(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column) and node.name.startswith("__input_"):
                return exp.column(inputs[int(node.name.rsplit("_", 1)[1])])
            return node

        placed = kind.expression.transform(place)
        text = check_expression(placed, sql_text(expression, self.dialect), frozenset(inputs))
        return Derived(name, placed, tuple(dict.fromkeys(inputs)), text)

    def name(self, node: exp.Expr, clause: str) -> str | None:
        """The released column ``node`` names (by name, grouping column or aggregate), else None. An
        aggregate that is not selected (``HAVING COUNT(*) > 7``) is released hidden: noised and charged
        like a selected one, filtered or sorted on, and not shown.

        A bare name that is both an output name and a selected grouping column of another output means, in
        HAVING, the grouping column (as in SQL, DuckDB and PostgreSQL: ``SELECT sex AS educ, educ AS sex ...
        HAVING educ > 2`` filters on ``educ``) and, in ORDER BY, the output (as in SQL)."""
        node = strip(node)
        if is_aggregate(node):
            spec = self.reader.read(node)
            for agg in self.aggregates:
                if _identity(agg) == spec.identity:
                    return agg.alias
            alias = self._unique(f"__{spec.base_name}")
            hidden = Aggregate(alias, spec.function, spec.column, spec.quantile, spec.sample)
            self.aggregates = (*self.aggregates, hidden)
            return alias
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            name = node.name.lower()
            key = self._key_output(node)
            if clause == "HAVING" and key is not None:
                return key
            if not node.args.get("table") and name in self.output:
                return name
            return key
        return None

    def _key_output(self, column: exp.Column) -> str | None:
        """The output name of the selected grouping column ``column`` names in the query's tables, else
        None."""
        try:
            ref = self.tables.resolve(column)
        except QueryRefused:
            return None
        for group_ref, alias in zip(self.group_refs, self.group_aliases, strict=True):
            if group_ref.key == ref.key and alias in self.output:
                return alias
        return None

    def term(self, node: exp.Expr, clause: str) -> str:
        """The hidden column of a HAVING operand or an ORDER BY item computed from released columns
        (``n * 100 / 2``, ``CAST(educ AS INT)``, ``COUNT(*) + 1``): post-processing, evaluated by kakeibo on
        the released table, never by the engine (:func:`~kakeibo.sql.derived.check_term`). Aggregates in it
        are released like ``name`` releases them; any other column must be an output."""
        text = sql_text(node, self.dialect)
        types = self.output_types()
        read: list[str] = []

        def output(part: exp.Expr) -> exp.Expr:
            if is_aggregate(part) or isinstance(part, exp.Column):
                known = isinstance(part, exp.Column) and not part.table and part.name in types
                name = self.name(part, clause) if clause == "HAVING" or not known else None
                name = part.name if name is None and known else name  # HAVING's hidden columns
                if name is None:
                    raise QueryRefused(
                        f"{clause} can only name output columns ({', '.join(self.output)}), and "
                        f"{sql_text(part, self.dialect)} is not one."
                    )
                types.update(self.output_types())  # a hidden aggregate it added
                if types[name] not in ("int", "float", "str"):
                    raise QueryRefused(
                        f"{clause} {text} computes with {name}, a {types[name]} output; kakeibo computes "
                        "with numbers and reads text keys only through a cast."
                    )
                read.append(name)
                return exp.column(name)
            return part

        expression = strip(node).copy().transform(output)
        numbers = frozenset(n for n in read if types[n] in ("int", "float"))
        texts = frozenset(n for n in read if types[n] == "str")
        as_text = check_term(expression, f"{clause} {text}", numbers, texts, clause)
        if as_text and clause != "ORDER BY":
            raise QueryRefused(f"{clause} {text} casts to text, which kakeibo does only to sort (ORDER BY).")
        for known_term in self.terms:  # ``sex = 1 OR sex > 2`` computes CAST(sex AS DOUBLE) once
            if known_term.expression == expression and known_term.text == as_text:
                return known_term.alias
        name = self._unique("__term")
        self.terms = (*self.terms, Derived(name, expression, tuple(dict.fromkeys(read)), as_text))
        return name

    def output_types(self) -> dict[str, str]:
        """The released columns' types: each grouping key's catalog type, each aggregate's output type
        (noisy counts ``int``, every other aggregate ``float``), an expression around aggregates ``float``
        (a CASE of texts: ``str``), a term ``float`` (cast to text: ``str``)."""
        types: dict[str, str] = {
            alias: key_type(ref) for ref, alias in zip(self.group_refs, self.group_aliases, strict=True)
        }
        for agg in self.aggregates:
            types[agg.alias] = AGGREGATES[agg.function].output_type
        for computed in (*self.derived, *self.terms):
            types[computed.alias] = "str" if computed.text else "float"
        return types

    # -- ORDER BY -------------------------------------------------------------------------------------

    def order_by(self, select: exp.Select) -> tuple[tuple[str, bool], ...]:
        """ORDER BY as ``(output name, descending)`` pairs."""
        order = select.args.get("order")
        if order is None:
            return ()
        result: list[tuple[str, bool]] = []
        for ordered in order.expressions:
            if ordered.args.get("with_fill"):
                raise QueryRefused("ORDER BY ... WITH FILL is not supported.")
            node = strip(ordered.this)
            name: str | None
            if isinstance(node, exp.Literal) and not node.is_string:
                position = numeric_literal(node)
                if position is None or position.denominator != 1 or not 1 <= position <= len(self.output):
                    raise QueryRefused(
                        f"ORDER BY {sql_text(node, self.dialect)} does not name an output column."
                    )
                name = self.output[int(position) - 1]
            else:
                name = self.name(node, "ORDER BY")
            if name is None and computed(node):
                name = self.term(node, "ORDER BY")
            if name is None:
                raise QueryRefused(
                    f"ORDER BY can only name output columns ({', '.join(self.output)}), and "
                    f"{sql_text(node, self.dialect)} is not one."
                )
            result.append((name, bool(ordered.args.get("desc"))))
        return tuple(result)


def computed(node: exp.Expr) -> bool:
    """Whether ``node`` computes from columns or aggregates (an expression, not one column or a constant):
    a term of HAVING or ORDER BY."""
    node = strip(node)
    return (
        not isinstance(node, exp.Column)
        and not is_aggregate(node)
        and any(isinstance(part, exp.Column) or is_aggregate(part) for part in node.walk())
    )


def _key_text(key: GroupKey) -> str:
    """A grouping key as a message names it."""
    return key.column.name if isinstance(key, ColumnRef) else key.text


def key_type(key: GroupKey) -> str:
    """A grouping key's catalog type."""
    return key.column.type if isinstance(key, ColumnRef) else key.type


def _identity(aggregate: Aggregate) -> tuple[object, ...]:
    """What tells two aggregates apart (as :attr:`AggregateCall.identity`)."""
    return (aggregate.function, aggregate.column, aggregate.quantile, aggregate.sample)


def limit(select: exp.Select) -> int | None:
    """The LIMIT (or FETCH) row count, when it is a plain whole number."""
    node = select.args.get("limit")
    if node is None:
        return None
    if isinstance(node, exp.Fetch):
        options = node.args.get("limit_options")
        if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
            raise QueryRefused("FETCH with PERCENT or WITH TIES is not supported; use LIMIT n.")
        value_node = node.args.get("count")
    else:
        if node.args.get("offset"):
            raise QueryRefused("OFFSET is not supported; use ORDER BY and LIMIT on the released rows.")
        options = node.args.get("limit_options")
        if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
            raise QueryRefused("LIMIT with a percentage or WITH TIES is not supported; use LIMIT n.")
        value_node = node.args.get("expression")
    value = None if value_node is None else numeric_literal(value_node)
    if value is None or value.denominator != 1 or not 0 <= value < 2**62:
        raise QueryRefused("LIMIT must be a whole number of rows below 2**62, such as LIMIT 10.")
    return int(value)
