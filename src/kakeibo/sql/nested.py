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

Refused, with a sentence: an inner query that aggregates, groups, filters groups, sorts, limits, skips,
deduplicates or nests again (its rows would no longer be the table's rows one by one: a per-person
aggregate needs the per-person truncation of the heavy-tails issue, not yet read here); an outer query
that joins the derived table to another; a column the inner query does not define; several common table
expressions, or one the query does not read exactly once.
"""

from __future__ import annotations

from sqlglot import exp

from .catalog import QueryRefused

__all__ = ["flatten"]

#: the clauses an inner query may have besides its SELECT list
_INNER_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "kind", "hint"})
#: the others, as a refusal names them
_CLAUSE_NAMES = {"group": "GROUP BY", "order": "ORDER BY", "with_": "WITH", "distinct": "DISTINCT"}


def flatten(select: exp.Select, dialect: str) -> exp.Select:
    """``select`` with a derived table or one common table expression in its FROM rewritten away (module
    docstring); ``select`` itself when it has neither."""
    inner, alias = _derived_table(select)
    if inner is None:
        return select
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
