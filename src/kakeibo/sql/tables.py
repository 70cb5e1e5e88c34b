"""The tables a query reads (FROM and JOIN) and how its column references resolve.

A query aggregates one sensitive catalog table, named alone (no files, table functions, VALUES or table
modifiers) or qualified by the default schema. kakeibo reads a catalog table by its bare name, that is from
the engine's default schema, so a qualifier may only say so: the schema ``main`` (DuckDB's default) or
``public`` (PostgreSQL's), whatever the engine, and in a query read as T-SQL also ``dbo`` (SQL Server's;
each dialect's ``default_schema``, :func:`kakeibo.sql.dialects.default_schemas`),
after the name of the engine's database when the session knows it (``db.main.census``, T-SQL's
``db.dbo.census`` and ``db..census``): the session asks its backend once
(:func:`kakeibo.backends.database_name`; DuckDB's in-memory database is ``memory``, a file's is its name
without the extension). Any other schema or database would name another table than the one kakeibo reads,
and is refused with the names the catalog has. A column may carry the same qualifiers before its table
(``main.census.age``).
The tables are joined by inner equi-joins: ``JOIN ... ON a = b [AND c = d]``, ``JOIN ... USING (c)``, or
a comma (or ``JOIN`` without a condition) with the equalities in WHERE. From the equalities the query states,
:meth:`Tables._relation` builds a join tree rooted at the first sensitive table:

1. sensitive tables join only along a reference the catalog declares (``orders.o_custkey =
   customer.c_custkey``), so each join result belongs to one person: each tree edge is the child's one
   reference to a unique key, so both of its rows reach the same person. Any other equality between two
   sensitive tables could pair the rows of two people, and is refused, as are self-joins (R2T's linear
   program would be needed); so are two tables that both reference a third (each person's rows of one
   paired with each of the other's);
2. public tables join on an equality whose two columns compare without a conversion, never on a column that
   identifies a person's rows (the privacy unit, a reference), and only on a column the catalog declares
   ``unique`` in the public table (the session checks that against the engine before the draw,
   :meth:`~kakeibo.sql.session.Session._check_unique`): every public join is a lookup that adds columns to
   each joined row and never repeats one. Why (issue 29, R7): a repeated key fans out before any per-person
   bound: one person's row with a rare key joined to four million public rows made an answer take 0.30 s
   against at most 0.007 s without it (PostgreSQL), a latency oracle at any epsilon, and the work of a
   query had no bound but the statement timeout. With unique keys the joined rows are the sensitive rows,
   so what a statement reads and how long it runs is bounded as for the table alone, and a row-level table,
   which has no person to bound by, keeps one row per person. The other design, repeated keys as weights
   capped at a public multiplicity, would still have the engine build the fanned-out rows before the cap; a
   lookup is what a dimension table is (TPC-H's nation, region, part and supplier), and a table keyed by a
   pair (partsupp) is not joined;
3. the one query table whose reference leads out of the query (the *top*) reaches its person through
   tables kakeibo joins itself (``__person_1``, ...), unless its reference holds the person's key already.

Equalities the tree does not use stay conditions (ON ones join WHERE). The *grain*, the query table no other
one references, is the table whose rows the join results are: its limits bound the query.
Identifiers are case-insensitive and come back in lower case.

A FROM clause whose join results can reference several persons -- a table named twice, a table with several
references, sensitive tables joined other than along a reference, two tables that both reference a third --
is refused with :class:`~kakeibo.sql.catalog.SeveralPersons`, and the session reads it again with
``several=True`` for R2T's linear program (:mod:`kakeibo.sql.program`). There every table joins the ones
before it by the equalities the query states (public ones on a unique key, as above; sensitive ones on any
columns that compare without a conversion: whatever the join, removing a person removes exactly the join
results that reference them), and each sensitive table's rows reach their persons along *every* reference
(:meth:`Tables.person_keys`), through tables kakeibo joins itself where the query does not join them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from sqlglot import exp
from sqlglot.errors import SqlglotError

from .catalog import Catalog, ColumnSpec, QueryRefused, Reference, SeveralPersons, TableSpec
from .dialects import default_schemas
from .predicates import TotalPredicate, strip
from .shape import JoinSpec

__all__ = ["ColumnRef", "Source", "Tables", "lower_name", "sql_text"]


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


@dataclass(frozen=True)
class _Equality:
    """``left = right``: columns of two tables of the query."""

    left: ColumnRef
    right: ColumnRef

    def node(self) -> exp.EQ:
        def column(ref: ColumnRef) -> exp.Column:
            return exp.column(ref.column.name, table=ref.source.qualifier)

        return exp.EQ(this=column(self.left), expression=column(self.right))


def _join_spec(new: ColumnRef, old: ColumnRef, kind: Literal["reference", "public"]) -> JoinSpec:
    """The join of ``new``'s table on ``new = old``."""
    return JoinSpec(
        new.source.spec, new.column.name, old.source.qualifier, old.column.name, new.source.alias, kind
    )


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The top-level conjunction of ``node``, in order."""
    node = strip(node)
    if isinstance(node, exp.And):
        return [*_conjuncts(node.this), *_conjuncts(node.expression)]
    return [node]


def _reference_step(
    equalities: list[_Equality], attached: list[Source]
) -> tuple[_Equality, ColumnRef, ColumnRef] | None:
    """The first equality that joins a sensitive table to the ``attached`` ones along a declared reference:
    (the equality, its referencing column, its referenced column)."""
    for equality in equalities:
        for child, parent in ((equality.left, equality.right), (equality.right, equality.left)):
            if (child.source in attached) == (parent.source in attached):
                continue
            if child.source.spec.public or parent.source.spec.public:
                continue
            if child.source.spec.reference == Reference(child.column.name, *parent.key):
                return equality, child, parent
    return None


def _public_step(
    equalities: list[_Equality], attached: list[Source]
) -> tuple[_Equality, ColumnRef, ColumnRef] | None:
    """The first equality that joins a public table to the ``attached`` ones on a column declared unique in
    it, else the first on any column (which :meth:`Tables._check_public_join` refuses): (the equality, the
    public table's column, the other column). Preferring a unique column makes the tree independent of the
    order the query states its equalities in (``c_nationkey = s_nationkey AND l_suppkey = s_suppkey`` joins
    supplier on its key, the other equality stays a condition)."""
    steps = [
        (equality, new, old)
        for equality in equalities
        for new, old in ((equality.left, equality.right), (equality.right, equality.left))
        if new.source not in attached and old.source in attached and new.source.spec.public
    ]
    return next((step for step in steps if step[1].column.unique), steps[0] if steps else None)


def _end(ref: ColumnRef) -> tuple[str, str]:
    """``ref`` as (qualifier, column)."""
    return ref.source.qualifier, ref.column.name


def _joins(equality: _Equality, source: Source, attached: list[Source]) -> bool:
    """Whether ``equality`` joins ``source`` to one of the ``attached`` tables."""
    ends = (equality.left.source, equality.right.source)
    return source in ends and any(other in attached for other in ends if other is not source)


class Tables:
    """The FROM clause of ``select`` checked against ``catalog``: the first sensitive table (``private``,
    where the engine statement starts), the tables joined to it (``joins``, in the statement's order, the
    tables kakeibo adds to reach the person included), the table of persons (``person``; ``None`` for a
    row-level table), where the privacy unit is (``unit``: qualifier and column), the table whose rows the
    join results are (``grain``, whose limits bound the query), ON conditions that join no table
    (``join_filters``, evaluated with WHERE), and column resolution.
    ``database`` is the name of the engine's database, when known: a three-part name may start with it.
    With ``several``, the FROM clause is read for R2T's program (module docstring): ``links`` says how each
    table after the first joins, ``person_keys`` where each join result's persons are, and ``joins`` holds
    the tables kakeibo adds to reach them."""

    def __init__(
        self,
        select: exp.Select,
        catalog: Catalog,
        dialect: str,
        database: str | None = None,
        *,
        several: bool = False,
    ) -> None:
        self.catalog = catalog
        self.several = several
        self.links: tuple[tuple[Source, tuple[exp.EQ, ...]], ...] = ()
        self.person_keys: tuple[tuple[str, str, str], ...] = ()
        self.dialect = dialect
        self.schemas = default_schemas(dialect)
        self.database = database.lower() if database else None
        self.using: set[str] = set()
        self.sources = self._sources(select)
        self.private = self._first_sensitive()
        self.person: TableSpec | None = None
        self.unit: tuple[str, str] | None = None
        self.grain = self.private.spec
        self.joins: tuple[JoinSpec, ...] = ()
        self.join_filters: tuple[exp.Expr, ...] = ()
        if several:
            self._several(select)
        else:
            self._relation(select)

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
        other = self._other_qualifier(node, self.catalog.tables.get(name.lower()))
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

    def _other_qualifier(self, node: exp.Table | exp.Column, spec: TableSpec | None = None) -> str:
        """What names another schema or database than the one the table lives in (``spec``'s schema when
        the catalog declares one, else the engine's default ones) in ``node`` (``""`` when nothing does),
        as the start of a refusal."""
        schema, database = lower_name(node.args.get("db")), lower_name(node.args.get("catalog"))
        if spec is None and isinstance(node, exp.Column):
            table = lower_name(node.args.get("table"))
            sources = getattr(self, "sources", ())  # (None while FROM itself is read)
            spec = next((s.spec for s in sources if s.spec.name == table and s.alias is None), None)
        if spec is not None and spec.schema is not None:
            if database and database != self.database:
                return f"the database {database} is not the session's"
            if schema and schema != spec.schema:
                return f"table {spec.name} lives in the schema {spec.schema}, not {schema}"
            return ""
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
        names = [s.spec.name for s in sources]
        repeated = next((name for name in names if names.count(name) > 1), None)
        if repeated is not None and not self.several:
            sensitive = not self.catalog.table(repeated).public
            raise SeveralPersons(
                f"table {repeated} appears twice"
                + (" (a join result could belong to two people)." if sensitive else ".")
            )
        qualifiers = [s.qualifier for s in sources]
        repeated = next((q for q in qualifiers if qualifiers.count(q) > 1), None)
        if repeated is not None:
            raise QueryRefused(
                f"two tables of the query go by the name {repeated!r}; give them distinct aliases."
            )
        return sources

    def _first_sensitive(self) -> Source:
        """The first sensitive table of FROM: the root of the join tree, where the engine statement starts."""
        sensitive = [s for s in self.sources if not s.spec.public]
        if not sensitive:
            names = ", ".join(s.spec.name for s in self.sources)
            raise QueryRefused(
                f"the query reads only public data ({names}); private queries must aggregate a sensitive "
                "table."
            )
        return sensitive[0]

    # -- joins ----------------------------------------------------------------------------------------

    def _equalities(self, select: exp.Select) -> tuple[list[_Equality], list[exp.Expr]]:
        """Every equality between columns of two tables the query states: from ON and USING (which must hold
        nothing else) and from WHERE's top-level conjunctions (comma joins); and the ON conditions, which the
        statement writes into its WHERE clause unless they join a table."""
        found: list[_Equality] = []
        on_conditions: list[exp.Expr] = []
        for position, join in enumerate(select.args.get("joins") or [], start=1):
            method, kind, side = (lower_name(join.args.get(k)) for k in ("method", "kind", "side"))
            label = " ".join(x.upper() for x in (method, side, kind) if x)
            if method or side or kind not in ("", "inner"):
                raise QueryRefused(
                    f"{label} JOIN is not supported; use an inner JOIN ... ON a = b along a declared "
                    "reference or to a public table."
                )
            for key, value in join.args.items():
                if value and key not in ("this", "on", "using", "kind"):
                    raise QueryRefused(f"the JOIN modifier {key.rstrip('_').upper()} is not supported.")
            joined = self.sources[position]
            using, on = join.args.get("using"), join.args.get("on")
            if using:
                for identifier in using:
                    found.append(self._using(lower_name(identifier), joined, position))
            elif on is not None:
                for conjunct in _conjuncts(on):
                    equality = self._equality(conjunct)
                    if equality is None:
                        raise QueryRefused(
                            "the JOIN condition must be equalities between columns of two tables, such as "
                            f"ON a = b, not {sql_text(conjunct, self.dialect)}; filter rows in WHERE."
                        )
                    found.append(equality)
                    on_conditions.append(conjunct)
            elif kind == "inner":
                raise QueryRefused("a JOIN needs an ON or USING condition; cross joins are not supported.")
        where = select.args.get("where")
        if where is not None:
            for conjunct in _conjuncts(where.this):
                equality = self._equality(conjunct)
                if equality is not None:
                    found.append(equality)
        return found, on_conditions

    def _using(self, column: str, joined: Source, position: int) -> _Equality:
        earlier = [s for s in self.sources[:position] if s.spec.has_column(column)]
        if not joined.spec.has_column(column):
            raise QueryRefused(f"the JOIN column {column!r} is not a column of table {joined.spec.name}.")
        if not earlier:
            raise QueryRefused(
                f"the JOIN column {column!r} is not a column of table {self.sources[0].spec.name}."
            )
        if len(earlier) > 1:
            raise QueryRefused(
                f"JOIN ... USING ({column}) could join {' or '.join(s.spec.name for s in earlier)}; write ON "
                "with qualified columns."
            )
        self.using.add(column)
        left = ColumnRef(earlier[0], earlier[0].spec.column(column))
        return _Equality(left, ColumnRef(joined, joined.spec.column(column)))

    def _equality(self, node: exp.Expr) -> _Equality | None:
        """``a = b`` between columns of two different tables, else ``None``."""
        node = strip(node)
        if not isinstance(node, exp.EQ):
            return None
        sides = strip(node.this), strip(node.expression)
        if not all(isinstance(side, exp.Column) for side in sides):
            return None
        left, right = (self.resolve(cast(exp.Column, side)) for side in sides)
        return None if left.source is right.source else _Equality(left, right)

    def _relation(self, select: exp.Select) -> None:
        """The join tree (see the module docstring): sensitive tables along declared references, public tables
        on equalities, then the tables that lead to the person; the privacy unit and the grain."""
        equalities, on_conditions = self._equalities(select)
        sensitive = [s for s in self.sources if not s.spec.public]
        attached, joins, used = [self.private], [], []
        children, parents = set(), set()
        while len(attached) < len(sensitive):
            step = _reference_step(equalities, attached)
            if step is None:
                raise self._sensitive_join_refusal(equalities, attached)
            equality, child, parent = step
            new, old = (child, parent) if parent.source in attached else (parent, child)
            joins.append(_join_spec(new, old, "reference"))
            attached.append(new.source)
            used.append(equality)
            children.add(child.source.spec.name)
            parents.add(parent.source.spec.name)
        leaves = [s for s in sensitive if s.spec.name not in parents]
        if len(leaves) > 1:
            raise SeveralPersons(
                f"tables {' and '.join(s.spec.name for s in leaves)} both belong to persons through "
                "references, so joining them pairs each row of one with each row of the other."
            )
        self.grain = leaves[0].spec
        top = next(s for s in sensitive if s.spec.name not in children)
        self.person = self.catalog.person(top.spec.name)
        person_joins, self.unit = self._path_to_person(top)
        person = self.person
        if (
            person is not None
            and person.correlation is not None
            and (len(sensitive) > 1 or person is not top.spec)
        ):
            raise QueryRefused(
                f"the users of table {person.name} are correlated, and queries that join it along "
                "references are not supported yet; query it alone."
            )
        while len(attached) < len(self.sources):
            public_step = _public_step(equalities, attached)
            if public_step is None:
                names = ", ".join(s.spec.name for s in self.sources if s not in attached)
                raise QueryRefused(
                    f"no equality in ON or WHERE joins table {names} to the others; cross joins are not "
                    "supported."
                )
            equality, new, old = public_step
            self._check_public_join(new, old)
            joins.append(_join_spec(new, old, "public"))
            attached.append(new.source)
            used.append(equality)
        self.joins = (*joins, *person_joins)
        for equality in equalities:  # the engine compares these columns: without a conversion?
            self.condition("JOIN ... ON", equality.node())
        self.join_filters = tuple(c for c in on_conditions if self._equality(c) not in used)

    def _several(self, select: exp.Select) -> None:
        """The FROM clause read for R2T's program (module docstring): each table after the first joins the
        ones before it by every equality the query states between them; then where each result's persons
        are."""
        equalities, _ = self._equalities(select)
        row_level = next((s for s in self.sources if not s.spec.public and s.spec.row_level), None)
        if row_level is not None:
            raise QueryRefused(
                f"table {row_level.spec.name} has row-level privacy (each row is a person), so a join "
                "result that pairs its rows with others has no persons to bound; join tables of persons "
                "and tables that reference them."
            )
        attached, links = [self.sources[0]], []
        while len(attached) < len(self.sources):
            step = next(
                (
                    (source, found)
                    for source in self.sources
                    if source not in attached
                    and (found := [e for e in equalities if _joins(e, source, attached)])
                ),
                None,
            )
            if step is None:
                names = ", ".join(s.spec.name for s in self.sources if s not in attached)
                raise QueryRefused(
                    f"no equality in ON or WHERE joins table {names} to the others; cross joins are not "
                    "supported."
                )
            source, found = step
            attached.append(source)
            links.append((source, tuple(e.node() for e in found)))
        self.links = tuple(links)
        for source in self.sources:  # each public table, the first one too, is a lookup on a unique key
            if source.spec.public:
                touching = [e for e in equalities if source in (e.left.source, e.right.source)]
                ends = [(e.left, e.right) if e.left.source is source else (e.right, e.left) for e in touching]
                new, old = next((end for end in ends if end[0].column.unique), ends[0])
                self._check_public_join(new, old)
        for equality in equalities:  # the engine compares these columns: without a conversion?
            self.condition("JOIN ... ON", equality.node())
        keys: list[tuple[str, str, str]] = []
        hidden: list[JoinSpec] = []
        for source in self.sources:
            if not source.spec.public:
                keys.extend(self._persons_of(source.spec, source.qualifier, equalities, hidden))
        linked = {frozenset((_end(e.left), _end(e.right))) for e in equalities}
        kept: list[tuple[str, str, str]] = []
        for key in dict.fromkeys(keys):  # a key the query equates with one kept already is the same person
            if not any(k[0] == key[0] and frozenset((k[1:], key[1:])) in linked for k in kept):
                kept.append(key)
        self.person_keys = tuple(kept)
        self.joins = tuple(hidden)

    def _persons_of(
        self, spec: TableSpec, qualifier: str, equalities: list[_Equality], hidden: list[JoinSpec]
    ) -> list[tuple[str, str, str]]:
        """Where the persons of the rows of ``spec`` (known as ``qualifier``) are, as (table of persons,
        qualifier, column): its privacy unit, and each reference followed to a privacy unit. A reference
        the query itself joins along (an equality with that key of a table of the query) needs nothing:
        that table's own persons are the same. Otherwise kakeibo joins the referenced table (``hidden``)."""
        if spec.privacy_unit is not None:
            return [(spec.name, qualifier, spec.privacy_unit)]
        found: list[tuple[str, str, str]] = []
        for reference in spec.references:
            target = self.catalog.tables[reference.table]
            if reference.key == target.privacy_unit:
                found.append((target.name, qualifier, reference.column))
                continue
            ends = {(qualifier, reference.column)}
            if any(
                {_end(e.left), _end(e.right)} == ends | {(s.qualifier, reference.key)}
                for e in equalities
                for s in self.sources
                if s.spec is target
            ):
                continue
            alias = f"__person_{len(hidden) + 1}"
            hidden.append(JoinSpec(target, reference.key, qualifier, reference.column, alias, "person"))
            found.extend(self._persons_of(target, alias, equalities, hidden))
        return found

    def _path_to_person(self, top: Source) -> tuple[tuple[JoinSpec, ...], tuple[str, str] | None]:
        """The tables kakeibo joins to reach the person from the query's ``top`` table (whose reference leads
        out of the query), and the ``(qualifier, column)`` that holds the privacy unit (``None``:
        row-level). A reference to the person table's privacy unit needs no join: it holds the unit."""
        spec, qualifier = top.spec, top.qualifier
        hidden: list[JoinSpec] = []
        while spec.privacy_unit is None:
            reference = spec.reference
            if reference is None:
                return (), None
            target = self.catalog.tables[reference.table]
            if reference.key == target.privacy_unit:
                return tuple(hidden), (qualifier, reference.column)
            alias = f"__person_{len(hidden) + 1}"
            hidden.append(JoinSpec(target, reference.key, qualifier, reference.column, alias, "person"))
            spec, qualifier = target, alias
        return tuple(hidden), (qualifier, spec.privacy_unit)

    def _sensitive_join_refusal(self, equalities: list[_Equality], attached: list[Source]) -> QueryRefused:
        """Why a sensitive table of the query cannot be joined to the ones before it."""
        for equality in equalities:
            ends = (equality.left, equality.right)
            if (
                all(not ref.source.spec.public for ref in ends)
                and sum(r.source in attached for r in ends) == 1
            ):
                left, right = ends
                joining = (
                    f"joining the sensitive tables {left.source.spec.name} and {right.source.spec.name} on "
                    f"{left.source.qualifier}.{left.column.name} = "
                    f"{right.source.qualifier}.{right.column.name} does not follow a declared reference"
                )
                row_level = next((r.source.spec.name for r in ends if r.source.spec.row_level), None)
                if row_level is not None:  # R2T's program has no persons to bound either
                    return QueryRefused(
                        f"{joining}, and table {row_level} has row-level privacy (each row is a person), "
                        "so a join result that pairs its rows with others has no persons to bound."
                    )
                return SeveralPersons(f"{joining}, so a join result could belong to two people.")
        pending = [s.spec.name for s in self.sources if not s.spec.public and s not in attached]
        return QueryRefused(
            f"no equality along a declared reference joins the sensitive table {pending[0]} to "
            f"{', '.join(s.spec.name for s in attached)}; JOIN sensitive tables along the catalog's "
            "references and other tables only if public."
        )

    def _check_public_join(self, new: ColumnRef, old: ColumnRef) -> None:
        """Rules for joining the public table of ``new`` on ``new = old`` (module docstring, 2)."""
        spec = old.source.spec
        if not spec.public and (
            old.column.name == spec.privacy_unit or any(r.column == old.column.name for r in spec.references)
        ):
            raise QueryRefused(
                f"joining on the privacy unit {old.column.name} is not supported, since it would attach "
                "public data to individual users."
                if old.column.name == spec.privacy_unit
                else f"joining on {old.column.name}, which identifies a person's rows, is not supported, "
                "since it would attach public data to individual users."
            )
        if not new.column.unique:
            raise QueryRefused(
                f"a join may not repeat sensitive rows, so it joins the public table {new.source.spec.name} "
                f"on a column the catalog declares unique there (unique = true), not {new.column.name}."
            )

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
        if name in self.using:  # USING (c) made both columns one: the first table's
            return ColumnRef(holders[0], holders[0].spec.column(name))
        options = " or ".join(f"{s.qualifier}.{name}" for s in holders)
        raise QueryRefused(f"the column {name!r} is ambiguous; write {options}.")

    def is_unit(self, ref: ColumnRef) -> bool:
        """Whether ``ref`` holds the privacy unit: the person table's unit, or a reference to it (its value is
        the person's key)."""
        spec = ref.source.spec
        if self.several:
            return ref.column.name == spec.privacy_unit or any(
                r.column == ref.column.name and r.key == self.catalog.tables[r.table].privacy_unit
                for r in spec.references
            )
        person = self.person
        if person is None:
            return False
        reference = spec.reference
        return ref.column.name == ref.source.spec.privacy_unit or (
            reference is not None
            and reference.column == ref.column.name
            and (reference.table, reference.key) == (person.name, person.privacy_unit)
        )

    def condition(self, clause: str, predicate: exp.Expr) -> exp.Expression:
        """``predicate`` checked total over the query's tables, literals in their engine-exact form
        (:mod:`kakeibo.sql.predicates`)."""
        return TotalPredicate(
            clause,
            lambda c: self.resolve(c).column.type,
            self.dialect,
            lambda c: self.resolve(c).column.public_values,
            lambda c: self.resolve(c).column.digits,
        ).check(predicate)

    def engine_column(self, column: exp.Column) -> exp.Column:
        """The column ``column`` names, as the engine statement writes it: lower case and quoted, qualified
        by its table's alias (or name) when the query joins tables."""
        ref = self.resolve(column)
        table = ref.source.qualifier if self.joins or self.several else None
        return exp.column(ref.column.name, table=table, quoted=True)

    def engine_condition(self, clause: str, predicate: exp.Expr) -> exp.Expression:
        """``predicate`` checked (:meth:`condition`) and written for the engine statement (its columns as
        :meth:`engine_column` writes them)."""
        checked = self.condition(clause, predicate)

        def rewrite(node: exp.Expr) -> exp.Expr:
            return self.engine_column(node) if isinstance(node, exp.Column) else node

        return cast(exp.Expression, checked.transform(rewrite))
