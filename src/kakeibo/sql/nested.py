"""Nested queries rewritten into the one shape the analyser checks (issue 32).

``SELECT ... FROM (SELECT <per-row expressions> FROM t [JOIN ...] [WHERE p]) AS s [WHERE q] ...`` and the
same with ``WITH s AS (SELECT ...)`` read rows of ``t`` transformed one row at a time: a projection, a
filter, CASE and arithmetic over columns. Such an inner query changes no row into several and reads no
other row, so the outer query over it is the outer query over ``t`` with each of ``s``'s columns replaced
by the expression that defines it, and the two WHERE clauses joined by AND. :func:`flatten` makes that
replacement before anything else reads the query; the result is then analysed like any query written flat
(every rule of :mod:`kakeibo.sql.analyze` applies to the substituted expressions, totality included), so
the engine statement, the noise and the charge are those of the flat query. Why not a second path through
the analyser: two checkers of the same SQL would drift apart.

An inner query that groups by a person (a privacy unit of the catalog), and by keys the outer query
groups by, computes per-person totals: ``SELECT k, SUM(s) FROM (SELECT person, k, SUM(x) AS s, COUNT(*) AS
c FROM t GROUP BY person, k) GROUP BY k``. Totals of totals are totals, so the outer aggregates read
back as aggregates of ``t``: ``SUM(s)`` is ``SUM(x)``, ``SUM(c)`` is ``COUNT(*)``, ``COUNT(*)`` (the
persons) is ``COUNT(DISTINCT person)``, ``AVG(c)`` is ``COUNT(*) / COUNT(DISTINCT person)``, and a WHERE
on a key filters the rows. The flat query then truncates each person's total as any query on the table
does (the ladder of the heavy-tails issue, :mod:`kakeibo.sql.truncation`). Refused: a condition or an
output that reads one person's total itself (``WHERE s > 10``, ``SELECT s``), an aggregate of totals that
is not a total (``MAX(s)``, ``MEDIAN(s)``), ``AVG(s)`` of a SUM (it skips persons whose values are all
NULL: write ``SUM(s) / COUNT(*)``), and an inner query that groups by anything but one person and the
outer keys.

Refused, with a sentence, besides: an inner query that filters groups, sorts, limits, skips,
deduplicates or nests again, or aggregates without grouping by a person (its rows would no longer be the
table's rows one by one, nor one per person); an outer query that joins the derived table to another; a
column the inner query does not define; several common table expressions, or one the query does not read
exactly once.
"""

from __future__ import annotations

from sqlglot import exp

from .catalog import QueryRefused

__all__ = ["flatten"]

#: the clauses an inner query may have besides its SELECT list
_INNER_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "kind", "hint"})
#: the others, as a refusal names them
_CLAUSE_NAMES = {"group": "GROUP BY", "order": "ORDER BY", "with_": "WITH", "distinct": "DISTINCT"}


def flatten(select: exp.Select, dialect: str, units: frozenset[str] = frozenset()) -> exp.Select:
    """``select`` with a derived table or one common table expression in its FROM rewritten away (module
    docstring); ``select`` itself when it has neither. ``units`` are the catalog's privacy-unit columns,
    which a per-person inner query groups by."""
    inner, alias = _derived_table(select)
    if inner is None:
        return select
    if inner.args.get("group") is not None:
        return _per_person(select, inner, alias, dialect, units)
    _check_inner(inner, dialect)
    defined = _definitions(inner, dialect)
    star = any(isinstance(e, exp.Star) for e in inner.expressions)
    outer = select.copy()
    outer.set("with_", None)

    def substitute(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
            return node
        table = node.table.lower() if node.table else ""
        if table and table != alias:
            raise QueryRefused(
                f"{node.sql(dialect=dialect)} names a table the query does not read; the outer query reads "
                f"the subquery {alias} only."
            )
        name = node.name.lower()
        if name in defined:
            definition = defined[name].copy()
            return definition if isinstance(definition, exp.Column) else exp.Paren(this=definition)
        if star:
            return exp.column(node.name, quoted=node.this.args.get("quoted", False))
        raise QueryRefused(f"the subquery {alias} has no column {name}; select it there.")

    items = []
    for item in outer.expressions:
        if isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
            name = item.name.lower()
            replaced = substitute(item)
            items.append(replaced if isinstance(replaced, exp.Column) else exp.alias_(replaced, name))
        elif isinstance(item, exp.Star):
            raise QueryRefused("SELECT * would return individual rows; select aggregates such as COUNT(*).")
        else:
            items.append(item.transform(substitute))
    outer.set("expressions", items)
    for key in ("where", "group", "having", "order"):
        clause = outer.args.get(key)
        if clause is not None:
            outer.set(key, clause.transform(substitute))
    outer.set("from_", inner.args["from_"].copy())
    outer.set("joins", [j.copy() for j in inner.args.get("joins") or []])
    inner_where, outer_where = inner.args.get("where"), outer.args.get("where")  # the outer's substituted
    if inner_where is not None:
        condition = inner_where.this.copy()
        if outer_where is not None:
            condition = exp.and_(exp.Paren(this=condition), exp.Paren(this=outer_where.this))
        outer.set("where", exp.Where(this=condition))
    return outer


def _derived_table(select: exp.Select) -> tuple[exp.Select | None, str]:
    """The inner query the FROM of ``select`` reads and its name, or ``(None, "")``."""
    ctes = select.args.get("with_")
    source = select.args.get("from_")
    table = None if source is None else source.this
    if ctes is not None:
        if ctes.args.get("recursive") or len(ctes.expressions) != 1:
            raise QueryRefused(
                "a query may define one common table expression (WITH name AS (...)) and read it in FROM."
            )
        (cte,) = ctes.expressions
        name = cte.alias.lower()
        if not isinstance(table, exp.Table) or table.name.lower() != name or table.args.get("db"):
            raise QueryRefused(f"the query defines {name} with WITH but its FROM does not read it.")
        if select.args.get("joins"):
            raise QueryRefused(f"a common table expression ({name}) is read alone, not joined to a table.")
        body = cte.this
        if not isinstance(body, exp.Select):
            raise QueryRefused(f"the common table expression {name} must be one SELECT.")
        return body, (table.alias or name).lower()
    if isinstance(table, exp.Subquery):
        if select.args.get("joins"):
            raise QueryRefused("a subquery in FROM is read alone, not joined to a table.")
        body = table.this
        if not isinstance(body, exp.Select):
            raise QueryRefused("a subquery in FROM must be one SELECT.")
        return body, (table.alias or "").lower()
    return None, ""


def _check_inner(inner: exp.Select, dialect: str) -> None:
    """Refuse an inner query whose rows are not its table's rows transformed one by one."""
    extra = sorted(k for k, v in inner.args.items() if v and k not in _INNER_CLAUSES)
    aggregates = [n for n in inner.walk() if isinstance(n, exp.AggFunc)]
    if extra or aggregates or any(isinstance(n, exp.Window) for n in inner.walk()):
        what = _CLAUSE_NAMES.get(extra[0], extra[0].rstrip("_").upper()) if extra else "an aggregate"
        raise QueryRefused(
            f"the subquery uses {what}; a subquery in FROM or WITH may only select, compute and filter its "
            "table's rows one by one (an aggregate per person is not read here yet)."
        )
    source = inner.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        raise QueryRefused("the subquery must read a catalog table (one level of nesting).")
    for node in inner.walk():
        if node is not inner and isinstance(node, exp.Query):
            raise QueryRefused("the subquery nests another query; one level of nesting is read.")


def _definitions(inner: exp.Select, dialect: str) -> dict[str, exp.Expr]:
    """Each column the inner query defines, by its name, as the expression that defines it."""
    defined: dict[str, exp.Expr] = {}
    for item in inner.expressions:
        if isinstance(item, exp.Star):
            continue
        if isinstance(item, exp.Alias):
            name, expression = item.alias.lower(), item.this
        elif isinstance(item, exp.Column) and not isinstance(item.this, exp.Star):
            name, expression = item.name.lower(), item
        else:
            raise QueryRefused(
                f"the subquery's {item.sql(dialect=dialect)} needs a name: write it AS a column name."
            )
        if name in defined:
            raise QueryRefused(f"the subquery defines {name} twice.")
        defined[name] = expression
    return defined


#: the clauses a per-person inner query may have besides its SELECT list
_PER_PERSON_CLAUSES = _INNER_CLAUSES | {"group"}


def _per_person(
    outer: exp.Select, inner: exp.Select, alias: str, dialect: str, units: frozenset[str]
) -> exp.Select:
    """The flat query a query over per-person totals means (module docstring)."""
    extra = sorted(k for k, v in inner.args.items() if v and k not in _PER_PERSON_CLAUSES)
    if extra or any(isinstance(n, (exp.Window, exp.Query)) and n is not inner for n in inner.walk()):
        what = _CLAUSE_NAMES.get(extra[0], extra[0].rstrip("_").upper()) if extra else "a nested query"
        raise QueryRefused(f"the per-person subquery uses {what}; it may only filter, group and aggregate.")
    source = inner.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        raise QueryRefused("the subquery must read a catalog table (one level of nesting).")
    grouped = [_plain_column(g, dialect, "the subquery's GROUP BY") for g in inner.args["group"].expressions]
    keys = {c.name.lower(): c for c in grouped}
    totals = _totals(inner, keys, dialect)
    outer_keys = [
        _defined_key(_plain_column(g, dialect, "GROUP BY"), keys, alias, dialect)
        for g in (outer.args["group"].expressions if outer.args.get("group") else [])
    ]
    person = sorted(set(keys) - set(outer_keys))
    if len(person) != 1 or person[0] not in units:
        raise QueryRefused(
            f"the subquery groups by {', '.join(sorted(keys))}; a per-person subquery groups by one privacy "
            "unit and the outer query's GROUP BY keys, so that each of its rows is one person's total."
        )
    unit = keys[person[0]]
    outputs = {item.alias.lower() for item in outer.expressions if isinstance(item, exp.Alias)}

    def rewrite(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.AggFunc):
            return _total_of_totals(node, totals, unit, alias, dialect)
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            if not node.table and node.name.lower() in outputs - set(keys):  # HAVING / ORDER BY an output
                return node
            name = _named(node, alias, dialect)
            if name in totals:
                raise QueryRefused(
                    f"{node.sql(dialect=dialect)} is one person's total; aggregate it (SUM, AVG of a count, "
                    "COUNT(*) for the persons), since a person's own total is no aggregate of many."
                )
            if name not in keys or name == person[0]:
                raise QueryRefused(
                    f"the subquery {alias} has no column {name} to read here; select it there."
                )
            return keys[name].copy()
        return node

    flat = outer.copy()
    flat.set("with_", None)
    flat.set("expressions", [item.transform(rewrite) for item in outer.expressions])
    for key in ("group", "having", "order"):
        clause = outer.args.get(key)
        if clause is not None:
            flat.set(key, clause.transform(rewrite))
    where = outer.args.get("where")
    if where is not None and any(isinstance(n, exp.AggFunc) for n in where.walk()):
        raise QueryRefused("a WHERE clause holds no aggregate; filter totals with HAVING.")
    conditions = [c.this.copy() for c in (inner.args.get("where"),) if c is not None]
    conditions += [where.this.transform(rewrite)] if where is not None else []
    flat.set(
        "where",
        None if not conditions else exp.Where(this=exp.and_(*(exp.Paren(this=c) for c in conditions))),
    )
    flat.set("from_", inner.args["from_"].copy())
    flat.set("joins", [j.copy() for j in inner.args.get("joins") or []])
    return flat


def _plain_column(node: exp.Expr, dialect: str, clause: str) -> exp.Column:
    """``node`` as a plain column, refused otherwise."""
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        raise QueryRefused(
            f"{clause} of a per-person query names columns; {node.sql(dialect=dialect)} is not one."
        )
    return node


def _named(column: exp.Column, alias: str, dialect: str) -> str:
    table = column.table.lower() if column.table else ""
    if table and table != alias:
        raise QueryRefused(
            f"{column.sql(dialect=dialect)} names a table the query does not read; the outer query reads the "
            f"subquery {alias} only."
        )
    return column.name.lower()


def _defined_key(column: exp.Column, keys: dict[str, exp.Column], alias: str, dialect: str) -> str:
    name = _named(column, alias, dialect)
    if name not in keys:
        raise QueryRefused(f"the outer GROUP BY {name} is not a GROUP BY key of the per-person subquery.")
    return name


def _totals(inner: exp.Select, keys: dict[str, exp.Column], dialect: str) -> dict[str, exp.AggFunc]:
    """Each per-person total the inner query selects, by name: a SUM or a COUNT (its keys aside)."""
    totals: dict[str, exp.AggFunc] = {}
    for item in inner.expressions:
        name = item.alias_or_name.lower()
        this = item.this if isinstance(item, exp.Alias) else item
        if isinstance(this, exp.Column) and this.name.lower() in keys and name == this.name.lower():
            continue
        if (
            not isinstance(item, exp.Alias)
            or not isinstance(this, (exp.Sum, exp.Count))
            or (isinstance(this, exp.Count) and isinstance(this.this, exp.Distinct))
        ):
            raise QueryRefused(
                f"the per-person subquery's {item.sql(dialect=dialect)} is not read: it selects its GROUP BY "
                "keys and named totals, SUM(...) AS name or COUNT(...) AS name."
            )
        if name in totals or name in keys:
            raise QueryRefused(f"the subquery defines {name} twice.")
        totals[name] = this
    return totals


def _total_of_totals(
    node: exp.AggFunc, totals: dict[str, exp.AggFunc], unit: exp.Column, alias: str, dialect: str
) -> exp.Expr:
    """An outer aggregate over per-person totals as the aggregate of the table it equals."""
    persons = exp.Count(this=exp.Distinct(expressions=[unit.copy()]))
    argument = node.this
    if isinstance(node, exp.Count) and (isinstance(argument, exp.Star) or argument is None):
        return persons
    read = _named(argument, alias, dialect) if isinstance(argument, exp.Column) else None
    total = totals.get(read or "")
    if total is None:
        raise QueryRefused(
            f"{node.sql(dialect=dialect)} does not aggregate a per-person total of the subquery; aggregate "
            "its totals by name."
        )
    if isinstance(node, exp.Sum):
        return total.copy()
    if isinstance(node, exp.Count) and isinstance(total, exp.Count):  # a count is never NULL
        return persons
    if isinstance(node, exp.Avg) and isinstance(total, exp.Count):
        return exp.Div(this=total.copy(), expression=persons)
    if isinstance(node, exp.Avg):
        raise QueryRefused(
            f"{node.sql(dialect=dialect)} skips the persons whose values are all NULL; write "
            f"SUM({read}) / COUNT(*) for the mean total over persons."
        )
    raise QueryRefused(
        f"{node.sql(dialect=dialect)} is not a total of per-person totals; kakeibo reads SUM, COUNT and the "
        "AVG of a count over them."
    )
