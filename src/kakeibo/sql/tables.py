"""The tables a query reads (FROM and JOIN) and how its column references resolve.

A query aggregates one sensitive catalog table, named alone (no files, table functions, VALUES or table
modifiers) or qualified by the default schema. kakeibo reads a catalog table by its bare name, that is from
the engine's default schema, so a qualifier may only say so: the schema ``main`` (DuckDB's default) or
``public`` (PostgreSQL's), whatever the engine, and in a query read as T-SQL also ``dbo`` (SQL Server's),
after the name of the engine's database when the session knows it (``db.main.census``, T-SQL's
``db.dbo.census`` and ``db..census``): the session asks its backend once
(:func:`kakeibo.backends.database_name`; DuckDB's in-memory database is ``memory``, a file's is its name
without the extension). Any other schema or database would name another table than the one kakeibo reads,
and is refused with the names the catalog has. A column may carry the same qualifiers before its table
(``main.census.age``).
Joins between sensitive tables are refused: they would break the contribution bounds the noise is
calibrated to. A JOIN to a public table is accepted as an inner equi-join on one column (not on
the privacy unit) whose two columns compare without a conversion. It may repeat a sensitive row once per
matching public row, so on a user-level table contribution bounding runs after the join; a row-level table
has no unit to bound by, so it may only be joined on a public column the catalog declares ``unique`` (the
session checks that against the engine). Identifiers are case-insensitive and come back in lower case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from sqlglot import exp
from sqlglot.errors import SqlglotError

from .catalog import Catalog, ColumnSpec, QueryRefused, TableSpec
from .predicates import TotalPredicate, strip
from .shape import JoinSpec

__all__ = ["DEFAULT_SCHEMAS", "ColumnRef", "Source", "Tables", "default_schemas", "lower_name", "sql_text"]

#: the schema qualifiers that name the engine's default schema, where kakeibo reads every catalog table
DEFAULT_SCHEMAS = ("main", "public")
#: T-SQL's default schema, which a query read as T-SQL may name too
TSQL_DEFAULT_SCHEMA = "dbo"


def default_schemas(dialect: str) -> tuple[str, ...]:
    """The schema qualifiers a query read in ``dialect`` may name the default schema with.

    >>> default_schemas("duckdb"), default_schemas("tsql")
    (('main', 'public'), ('main', 'public', 'dbo'))
    """
    return (*DEFAULT_SCHEMAS, TSQL_DEFAULT_SCHEMA) if dialect == "tsql" else DEFAULT_SCHEMAS


def _either(names: tuple[str, ...]) -> str:
    """Two or more ``names`` as alternatives, for a message: ``a or b``, ``a, b or c``."""
    return f"{', '.join(names[:-1])} or {names[-1]}"


def lower_name(identifier: exp.Expr | str | None) -> str:
    """An identifier's name in lower case (``""`` for none)."""
    if identifier is None:
        return ""
    if isinstance(identifier, str):
        return identifier.lower()
    return identifier.name.lower()


def sql_text(node: exp.Expr, dialect: str) -> str:
    """``node`` written back as SQL, for a refusal message."""
    try:
        return node.sql(dialect=dialect)
    except SqlglotError:  # pragma: no cover - sqlglot renders what it parsed
        return node.sql()


@dataclass(frozen=True)
class Source:
    """A table of the FROM clause."""

    spec: TableSpec
    alias: str | None

    @property
    def qualifier(self) -> str:
        return self.alias or self.spec.name


@dataclass(frozen=True)
class ColumnRef:
    """A resolved column reference."""

    source: Source
    column: ColumnSpec

    @property
    def key(self) -> tuple[str, str]:
        return (self.source.spec.name, self.column.name)


class Tables:
    """The FROM clause of ``select`` checked against ``catalog``: its sensitive table (``private``), the
    public table it joins (``public``, with ``join`` describing the join) and column resolution.
    ``database`` is the name of the engine's database, when known: a three-part name may start with it."""

    def __init__(
        self, select: exp.Select, catalog: Catalog, dialect: str, database: str | None = None
    ) -> None:
        self.catalog = catalog
        self.dialect = dialect
        self.schemas = default_schemas(dialect)
        self.database = database.lower() if database else None
        self.using: str | None = None
        self.sources = self._sources(select)
        self.private, self.public = self._roles()
        self.join = self._join(select)

    # -- tables ---------------------------------------------------------------------------------------

    def _table(self, node: exp.Expr) -> Source:
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Dot):  # a.b.c.d
            raise QueryRefused(
                f"the table name {sql_text(node, self.dialect)} has too many qualifiers; {self._naming()}."
            )
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise QueryRefused(
                "reading files, table functions or VALUES in FROM is not allowed; "
                "query a catalog table by name."
            )
        name = node.name
        other = self._other_qualifier(node)
        if other:
            raise QueryRefused(f"{other}, where kakeibo reads its tables; {self._naming()}.")
        if node.args.get("sample"):
            raise QueryRefused("TABLESAMPLE is not supported; sampling is not part of the privacy analysis.")
        for key, value in node.args.items():
            if value and key not in ("this", "alias", "db", "catalog"):
                raise QueryRefused(
                    f"table modifiers such as {sql_text(node, self.dialect)} are not supported; name the "
                    "table alone."
                )
        if node.this.quoted and any(ch in name for ch in "./\\"):
            raise QueryRefused(
                f"reading files such as {name!r} is not allowed; query a catalog table by name."
            )
        if (node.args.get("db") or node.args.get("catalog")) and name.lower() not in self.catalog.tables:
            shown = ".".join(part.name.lower() for part in node.parts)
            raise QueryRefused(f"unknown table {shown!r}; {self._naming()}.")
        spec = self.catalog.table(name)
        alias_node = node.args.get("alias")
        alias: str | None = None
        if alias_node is not None:
            if alias_node.args.get("columns"):
                raise QueryRefused(
                    f"column aliases on table {spec.name} are not supported; alias columns in SELECT."
                )
            alias = lower_name(alias_node.this) or None
        return Source(spec, alias)

    def _other_qualifier(self, node: exp.Table | exp.Column) -> str:
        """What names another schema or database than the engine's default ones in ``node`` (``""`` when
        nothing does), as the start of a refusal."""
        schema, database = lower_name(node.args.get("db")), lower_name(node.args.get("catalog"))
        if database and database != self.database:
            known = (
                f"the session's database {self.database}" if self.database else "known to be the session's"
            )
            return f"the database {database} is not {known}"
        if schema and schema not in self.schemas:
            return f"the schema {schema} is not the engine's default one"
        return ""

    def _naming(self) -> str:
        """Which table names are known, for a refusal. It does not spell the engine's database name, which
        only a refusal of another database name shows: the other refusals depend on the query and the catalog
        alone (the adversarial tests compare them between neighbouring databases, each with its own name)."""
        database = ", optionally after the session's database" if self.database else ""
        return (
            f"the catalog has: {', '.join(self.catalog.tables)}, named without a schema or qualified by "
            f"{_either(self.schemas)}{database}"
        )

    def _sources(self, select: exp.Select) -> list[Source]:
        from_ = select.args.get("from_")
        if from_ is None:
            raise QueryRefused("the query has no FROM clause; name a catalog table to aggregate.")
        sources = [self._table(from_.this)]
        for join in select.args.get("joins") or []:
            sources.append(self._table(join.this))
        if len(sources) > 2:
            raise QueryRefused("at most one JOIN (to a public table) is supported.")
        return sources

    def _roles(self) -> tuple[Source, Source | None]:
        """The sensitive table and the public one (if any)."""
        names = [s.spec.name for s in self.sources]
        if len(set(names)) != len(names):
            raise QueryRefused(f"table {names[0]} appears twice; self-joins are not supported.")
        qualifiers = [s.qualifier for s in self.sources]
        if len(set(qualifiers)) != len(qualifiers):
            raise QueryRefused(
                f"two tables of the query go by the name {qualifiers[0]!r}; give them distinct aliases."
            )
        private = [s for s in self.sources if not s.spec.public]
        if not private:
            raise QueryRefused(
                f"the query reads only public data ({', '.join(names)}); private queries must aggregate a "
                "sensitive table."
            )
        if len(private) > 1:
            raise QueryRefused(
                f"joining two sensitive tables ({private[0].spec.name} and {private[1].spec.name}) is not "
                "supported; JOIN only to public tables."
            )
        publics = [s for s in self.sources if s.spec.public]
        return private[0], publics[0] if publics else None

    def _join(self, select: exp.Select) -> JoinSpec | None:
        joins = select.args.get("joins") or []
        if not joins:
            return None
        join = joins[0]
        assert self.public is not None
        private, public = self.private, self.public
        method, kind, side = (lower_name(join.args.get(k)) for k in ("method", "kind", "side"))
        label = " ".join(x.upper() for x in (method, side, kind) if x)
        if method or side or kind not in ("", "inner"):
            raise QueryRefused(
                f"{label} JOIN is not supported; use an inner JOIN ... ON a = b to a public table."
            )
        for key, value in join.args.items():
            if value and key not in ("this", "on", "using", "kind"):
                raise QueryRefused(f"the JOIN modifier {key.rstrip('_').upper()} is not supported.")
        using = join.args.get("using")
        on = join.args.get("on")
        if using:
            if len(using) != 1:
                raise QueryRefused("JOIN ... USING must name exactly one column.")
            column = lower_name(using[0])
            for source in (private, public):
                if not source.spec.has_column(column):
                    raise QueryRefused(
                        f"the JOIN column {column!r} is not a column of table {source.spec.name}."
                    )
            self.using = column
            left, right = column, column
        elif on is not None:
            condition = strip(on)
            if not (
                isinstance(condition, exp.EQ)
                and isinstance(strip(condition.this), exp.Column)
                and isinstance(strip(condition.expression), exp.Column)
            ):
                raise QueryRefused(
                    f"the JOIN condition must be a single equality between a column of {private.spec.name} "
                    f"and a column of {public.spec.name}, such as ON a = b."
                )
            sides = [strip(condition.this), strip(condition.expression)]
            refs = [self.resolve(side) for side in sides if isinstance(side, exp.Column)]
            by_table = {ref.source.spec.name: ref for ref in refs}
            if set(by_table) != {private.spec.name, public.spec.name}:
                raise QueryRefused(
                    f"the JOIN condition must compare a column of {private.spec.name} with a column of "
                    f"{public.spec.name}."
                )
            left, right = by_table[private.spec.name].column.name, by_table[public.spec.name].column.name
        else:
            raise QueryRefused("a JOIN needs an ON or USING condition; cross joins are not supported.")
        pair = exp.EQ(
            this=exp.column(left, table=private.qualifier),
            expression=exp.column(right, table=public.qualifier),
        )
        self.condition("JOIN ... ON", pair)  # the two columns compare without a row-by-row conversion
        if private.spec.privacy_unit is None and not public.spec.column(right).unique:
            raise QueryRefused(
                f"table {private.spec.name} has row-level privacy, so a join may not repeat its rows: join "
                f"on a column the catalog declares unique in {public.spec.name} (unique = true), not {right}."
            )
        if left == private.spec.privacy_unit:
            raise QueryRefused(
                f"joining on the privacy unit {left} is not supported, since it would attach public data to "
                "individual users."
            )
        return JoinSpec(public.spec, left, right, public.alias)

    # -- columns --------------------------------------------------------------------------------------

    def resolve(self, column: exp.Column) -> ColumnRef:
        """The table column ``column`` names, or a refusal (unknown, ambiguous, ``*``)."""
        if isinstance(column.this, exp.Star):
            raise QueryRefused(
                "SELECT * would return individual rows; select aggregates such as COUNT(*) or AVG(column), "
                "grouped by columns."
            )
        name = column.name.lower()
        if self._other_qualifier(column):
            raise QueryRefused(
                f"the column reference {sql_text(column, self.dialect)} has too many qualifiers; qualify a "
                f"column by its table or alias, or by {_either(self.schemas)} and the table."
            )
        qualifier = lower_name(column.args.get("table"))
        if qualifier:
            for source in self.sources:
                if source.qualifier == qualifier:
                    return ColumnRef(source, source.spec.column(name))
            raise QueryRefused(
                f"the column {qualifier}.{name} names an unknown table or alias {qualifier!r}."
            )
        holders = [s for s in self.sources if s.spec.has_column(name)]
        if len(holders) == 1:
            return ColumnRef(holders[0], holders[0].spec.column(name))
        if not holders:
            if len(self.sources) == 1:
                raise QueryRefused(f"table {self.sources[0].spec.name} has no column {name!r}.")
            raise QueryRefused(f"no table of the query has a column {name!r}.")
        if name == self.using:
            return ColumnRef(self.private, self.private.spec.column(name))
        options = " or ".join(f"{s.qualifier}.{name}" for s in holders)
        raise QueryRefused(f"the column {name!r} is ambiguous; write {options}.")

    def condition(self, clause: str, predicate: exp.Expr) -> exp.Expression:
        """``predicate`` checked total over the query's tables, literals in their engine-exact form
        (:mod:`kakeibo.sql.predicates`)."""
        return TotalPredicate(clause, lambda c: self.resolve(c).column.type, self.dialect).check(predicate)

    def engine_column(self, column: exp.Column) -> exp.Column:
        """The column ``column`` names, as the engine statement writes it: lower case and quoted, qualified
        by its table's alias (or name) when the query joins a public table."""
        ref = self.resolve(column)
        table = ref.source.qualifier if self.public is not None else None
        return exp.column(ref.column.name, table=table, quoted=True)

    def engine_condition(self, clause: str, predicate: exp.Expr) -> exp.Expression:
        """``predicate`` checked (:meth:`condition`) and written for the engine statement (its columns as
        :meth:`engine_column` writes them)."""
        checked = self.condition(clause, predicate)

        def rewrite(node: exp.Expr) -> exp.Expr:
            return self.engine_column(node) if isinstance(node, exp.Column) else node

        return cast(exp.Expression, checked.transform(rewrite))
