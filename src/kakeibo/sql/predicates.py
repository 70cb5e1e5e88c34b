"""Total conditions: the WHERE, JOIN ... ON and HAVING predicates kakeibo lets an engine evaluate.

Why a condition must be *total*. An engine error is not noise. If ``CASE WHEN user_id = 7 THEN CAST(name
AS INT) ... END`` fails exactly when user 7 is present, the error answers, exactly, whether they are; and a
refusal is free, so the analyst can ask again and again. The same holds for every expression the engine can
fail on for some values but not others (casts, arithmetic that overflows, string functions, a column
coerced to the type of a literal), and for every engine: PostgreSQL and Spark read ``\\`` as LIKE's escape
character and reject a pattern ending with it row by row, Spark runs LIKE as a backtracking regular
expression, DuckDB casts an integer column to ``DECIMAL(38, 35)`` to compare it with
``0.00000000000000000000000000000000001`` and overflows on rows of four digits. Each engine's facts are its
table in :mod:`kakeibo.sql.dialects` (``like_escape``, ``like_matching``, ``int_to_literal_scale``,
``exponent_literal``, ``decimal_literal``), checked against the engines by ``tests/test_engine_semantics.py``.

So a condition holds only comparisons (``= <> < <= > >=``, ``IS [NOT] DISTINCT FROM``, ``BETWEEN``,
``IN (...)``, ``LIKE`` / ``ILIKE``, ``IS [NOT] NULL``) between columns (or ``LOWER`` / ``UPPER`` of text
columns) and literals of the column's catalog type, joined by ``AND``, ``OR`` and ``NOT``; this is checked
statically, the same for every engine. The checker also rewrites every literal into the form each engine
compares exactly, so the row set the engine selects is the one kakeibo reasons about (parallel
composition builds a region from it, :mod:`kakeibo.accounting.overlap`):

* an ``int`` column is compared with whole numbers only, written as integers (``age = 30.0`` becomes
  ``age = 30``; ``age = 30.5`` is refused, since engines disagree on whether to round the literal or to
  widen the column);
* a ``float`` column is compared with the double nearest the literal, written in exponent form
  (``0.1e0``): DuckDB and Spark read that as a DOUBLE, PostgreSQL as a numeric that it converts to the
  same double with correct rounding. Decimal literals would be read at each engine's own scale (DuckDB
  reads one of more than 38 digits as a DOUBLE, Spark refuses it), so that two literals distinct as exact
  numbers could select the same rows;
* a ``decimal`` column (``DECIMAL(p, s)``, issue 32) is compared with a literal written exactly in its
  scale (``price < 10.5`` on ``DECIMAL(15, 2)`` sends ``10.50``), which every engine reads as an exact
  decimal of at most p digits; a literal the column cannot hold (more than s digits after the point, or
  beyond its range) is refused;
* a LIKE pattern has no escape character (as in DuckDB; every ``\\`` is a plain character) and at most
  :data:`MAX_LIKE_CHARS` characters (a row's match takes time proportional to the pattern's length too),
  and is sent with an explicit ``ESCAPE '!'`` (``!``, and a ``%`` or ``_`` meant literally, escaped with
  ``!``), so every engine reads it alike and no row can make it fail. It may have any number of ``%``
  wildcards, and every engine matches it in time linear in the text (times the pattern), since a row's
  time is what an analyst sees (latency) and must not grow faster for a row of one neighbouring world:
  DuckDB and PostgreSQL never go back over an earlier ``%`` (``like_matching``). Spark matches LIKE as a
  backtracking regular expression (``%`` is ``.*``), in which ``A%B``, ``%A%`` and ``A%B%`` are linear but
  ``%A%B`` tries every split of the text, quadratic (more ``%`` raise the power), so Spark gets a pattern
  with more than one ``%`` before its end as the expression of :func:`linear_like` instead;
* in a query read as T-SQL, ``[`` opens a character class, as SQL Server reads it (its ``like_classes``,
  :mod:`kakeibo.sql.dialects.tsql`): a class of one character (``[%]``, ``[_]``, ``[[]``, ``[a]``: T-SQL's
  way to write a wildcard or ``[`` literally) is sent as that character, escaped when needed, and counts
  as a character, not a wildcard; any other class (``[ns]``, ``[a-c]``, ``[^a]``, ``[]``, an unclosed
  ``[``) is refused, since the LIKE of DuckDB,
  PostgreSQL and Spark has no classes and would read ``[`` as a plain character, answering about other
  rows. In every other dialect ``[`` is a plain character, as those engines read it (sqlglot passes the
  pattern through unchanged in both cases);
* numeric literals are read only when short (:func:`kakeibo.privacy.is_short_number`, the rule epsilon
  follows too), before any arithmetic: ``1e10000000`` would take seconds to expand.

A literal of another type than its column is converted once, here, where the catalog makes the result
unambiguous (issue 32), and the engine then compares values of one type, as above; everywhere else it is
refused, since an engine would convert the column row by row:

* a ``str`` column whose declared ``public_values`` are all whole numerals written plainly (``"7"``, not
  ``"07"`` or ``"+7"``) compares with a whole number as with its numeral (``educ = 2`` is ``educ = '2'``,
  ``educ IN (1, 2)`` likewise), and an order comparison or BETWEEN with numbers becomes the IN list of the
  declared numerals that satisfy it numerically (``educ < 3`` is ``educ IN ('1', '2')``; none: FALSE).
  The column's other values, if the catalog's list is incomplete, are compared as text;
* a ``str`` column whose public values are exactly a pair of truth spellings (``true``/``false`` in one
  case, ``t``/``f``, ``yes``/``no``, ``y``/``n``, ``1``/``0``) compares with TRUE and FALSE as with them;
* an ``int`` or ``float`` column compares with a text literal that is a plain decimal numeral as with that
  number (``age = '30'``), and a ``bool`` column with ``1`` / ``0`` and with ``'true'`` / ``'false'`` (in
  any case) as with TRUE / FALSE.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from datetime import date
from fractions import Fraction
from typing import cast

from sqlglot import exp

from ..errors import ArgumentError
from ..privacy import MAX_EXPONENT, MAX_NUMBER_CHARS, is_short_number
from .catalog import QueryRefused
from .dialects import LIKE_ESCAPE, double_text, query_dialect

__all__ = [
    "COMPARISONS",
    "MAX_LIKE_CHARS",
    "CharacterClassError",
    "TotalPredicate",
    "double_text",
    "is_text",
    "like_units",
    "linear_like",
    "numeric_literal",
    "strip",
]

MAX_LIKE_CHARS = 256
_WILDCARDS = "%_"
INT_RANGE = 2**63

_NUMBER = re.compile(r"(?P<digits>[0-9]*\.?[0-9]*)(?:[eE](?P<exponent>[+-]?[0-9]+))?")
#: operand kinds that compare without a row-by-row conversion (catalog types and literal kinds)
_SAME_KIND = (
    {"int", "float", "decimal", "number"},
    {"str", "text"},
    {"bool", "boolean"},
    {"date", "date_literal"},
)
#: the comparisons a condition may make
COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
_SMALLEST_NORMAL = Fraction(sys.float_info.min)
_LARGEST_DOUBLE = Fraction(sys.float_info.max)


def strip(node: exp.Expr) -> exp.Expr:
    """``node`` without enclosing parentheses."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def is_text(node: exp.Expr) -> bool:
    """Whether ``node`` is a string literal."""
    node = strip(node)
    return isinstance(node, exp.Literal) and node.is_string


def is_iso_date(text: str) -> bool:
    """Whether ``text`` is a date written ``YYYY-MM-DD``."""
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


def numeric_literal(node: exp.Expr) -> Fraction | None:
    """The exact value of a numeric literal (possibly negated or parenthesised), else ``None``.

    Refuses a literal that is not :func:`~kakeibo.privacy.is_short_number` before expanding it.

    >>> from sqlglot import parse_one
    >>> numeric_literal(parse_one("-(2.5e1)")), numeric_literal(parse_one("'a'"))
    (Fraction(-25, 1), None)
    >>> numeric_literal(parse_one("1e10000000"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kakeibo.sql.catalog.QueryRefused: the number 1e10000000 is out of range: ...
    """
    node = strip(node)
    sign = 1
    while isinstance(node, exp.Neg):
        sign = -sign
        node = strip(node.this)
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    text = str(node.this)
    match = _NUMBER.fullmatch(text)
    if match is None or not any(ch.isdigit() for ch in match["digits"]):
        return None
    if not is_short_number(text):
        raise QueryRefused(
            f"the number {text[:40]}{'...' if len(text) > 40 else ''} is out of range: numbers may have at "
            f"most {MAX_NUMBER_CHARS} characters and exponents within +-{MAX_EXPONENT}."
        )
    return sign * Fraction(text)


class CharacterClassError(ArgumentError):
    """A T-SQL LIKE character class other than one literal character; its text is the class as written."""


def like_units(pattern: str, dialect: str) -> list[str]:
    """The units of the LIKE ``pattern`` (read as ``dialect`` reads it, without an escape character), each
    written for ``ESCAPE '!'``: the wildcard ``%`` or ``_``, or one literal character (``!%``, ``!_`` and
    ``!!`` for the three that need the escape); joined, they are the pattern every engine reads alike.

    In a dialect whose LIKE has classes (``like_classes`` of :func:`kakeibo.sql.dialects.query_dialect`:
    T-SQL) a class of one character is that character; another class raises :class:`CharacterClassError`
    (see the module docstring).

    >>> like_units("50!%", "duckdb"), like_units("[a]", "duckdb")
    (['5', '0', '!!', '%'], ['[', 'a', ']'])
    >>> like_units("[[]5[%]_[!]", "tsql")
    ['[', '5', '!%', '_', '!!']
    >>> like_units("[ns]%", "tsql")
    Traceback (most recent call last):
    ...
    kakeibo.sql.predicates.CharacterClassError: [ns]
    """
    classes = query_dialect(dialect).like_classes
    units: list[str] = []
    position = 0
    while position < len(pattern):
        char = pattern[position]
        if char == "[" and classes:
            char, position = _tsql_class(pattern, position)
            units.append(_literal(char))
        else:
            units.append(char if char in _WILDCARDS else _literal(char))
            position += 1
    return units


def _tsql_class(pattern: str, start: int) -> tuple[str, int]:
    """The one character the T-SQL class opening at ``pattern[start]`` stands for, and the position after
    it; :class:`CharacterClassError` for a class of several characters, a range, a negation or no ``]``."""
    end = pattern.find("]", start + 1)
    if end < 0:
        raise CharacterClassError(f"{pattern[start:]} (no closing ])")
    inside = pattern[start + 1 : end]
    if len(inside) != 1 or inside == "^":
        raise CharacterClassError(pattern[start : end + 1])
    return inside, end + 1


def _literal(char: str) -> str:
    """``char`` matched literally under ``ESCAPE '!'``."""
    return LIKE_ESCAPE + char if char in _WILDCARDS + LIKE_ESCAPE else char


def linear_like(node: exp.Expr) -> exp.Expr:
    r"""``node``; but a LIKE or ILIKE as kakeibo sends it (its pattern written for ``ESCAPE '!'``) with more
    than one ``%`` before its end becomes the same condition as a regular expression that a backtracking
    matcher runs in time linear in the text, times the pattern (for Spark, whose LIKE is such a matcher:
    ``like_matching``; :func:`kakeibo.sql.rewrite.engine_sql` applies it to every node of a statement).

    Why it is exact: split at its ``%``, the pattern is a first piece, middle pieces and a last piece, each
    of fixed length (one character per literal or ``_``). A text matches if and only if it starts with the
    first piece, ends with the last, and holds the middle ones in order between them without overlap; and
    then the greedy choice works too, each middle piece at its leftmost place after the one before, since a
    later place only leaves the rest less room. ``(?s)^F(?>.*?M1)...(?>.*?Mk).*?L\z`` makes that choice:
    ``.*?`` tries the places left to right, and the atomic group ``(?>...)`` keeps the first that matches,
    so that no later failure makes the matcher try another. ``(?s)`` makes ``.`` any character, line
    terminators too, and ``_`` is ``.``, as in Spark's own translation of LIKE
    (``StringUtils.escapeLikeRegex``); literal characters are quoted (``\Q...\E``, as ``Pattern.quote``
    does). Why it is linear: a piece is tried at most once at each place of the text, at the cost of its
    length, and a failure is final (no atomic group is entered again, and ``^`` fails at once at every
    other start of RLIKE's search). Why it is total: the expression is a constant, well formed by
    construction, and RLIKE fails on no text.

    An ILIKE is Spark's ``lower(text) LIKE lower(pattern)``: the text is lowered, and each run of literal
    characters by ``LOWER`` in the statement. That is Java's lower case of the whole pattern, since a run
    ends at a ``%``, ``_`` or ``!``, which are no letters and end a word for Java (the one letter Java
    lowers by its neighbours, the capital sigma, looks no further than its word); and a run in lower case
    holds no ``E``, so no ``\E`` in it ends its quote early.

    >>> like = exp.Like(this=exp.column("s"), expression=exp.Literal.string("%a%b_"))
    >>> print(linear_like(exp.Escape(this=like, expression=exp.Literal.string("!"))).sql("spark"))
    s RLIKE '(?s)^(?>.*?\\Qa\\E).*?\\Qb\\E.\\z'
    >>> ilike = exp.ILike(this=exp.column("s"), expression=exp.Literal.string("%a%b_"))
    >>> print(linear_like(exp.Escape(this=ilike, expression=exp.Literal.string("!"))).sql("spark"))
    LOWER(s) RLIKE CONCAT('(?s)^(?>.*?\\Q', LOWER('a'), '\\E).*?\\Q', LOWER('b'), '\\E.\\z')
    """
    if not isinstance(node, exp.Escape) or not isinstance(node.this, (exp.Like, exp.ILike)):
        return node
    like = node.this
    pieces = _pieces(like.expression.name)
    if len(pieces) < 3 or (len(pieces) == 3 and not pieces[-1]):  # LIKE is linear: A%B, %A%, A%B%
        return node
    folded = isinstance(like, exp.ILike)
    parts: list[str | exp.Expr] = []

    def syntax(text: str) -> None:
        if parts and isinstance(parts[-1], str):
            parts[-1] += text
        else:
            parts.append(text)

    def piece(units: list[str | None]) -> None:
        for unit in units:
            if unit is None:
                syntax(".")
            elif folded:
                syntax("\\Q")
                parts.append(exp.Lower(this=exp.Literal.string(unit)))
                syntax("\\E")
            else:
                syntax("\\Q" + unit.replace("\\E", "\\E\\\\E\\Q") + "\\E")

    first, *middle, last = pieces
    syntax("(?s)^")
    piece(first)
    for units in filter(None, middle):
        syntax("(?>.*?")
        piece(units)
        syntax(")")
    syntax(".*?")
    piece(last)
    syntax("\\z")
    regex = [exp.Literal.string(part) if isinstance(part, str) else part for part in parts]
    text = exp.Lower(this=like.this) if folded else like.this
    matched = exp.RegexpLike(
        this=text, expression=regex[0] if len(regex) == 1 else exp.Concat(expressions=regex)
    )
    return exp.Not(this=matched) if like.args.get("negate") else matched


def _pieces(pattern: str) -> list[list[str | None]]:
    """The pattern (written for ``ESCAPE '!'``) split at its ``%`` wildcards: each piece its runs of literal
    characters, with None for each ``_``."""
    pieces: list[list[str | None]] = [[]]
    chars = iter(pattern)
    for char in chars:
        units = pieces[-1]
        if char == "%":
            pieces.append([])
        elif char == "_":
            units.append(None)
        else:
            literal = next(chars) if char == LIKE_ESCAPE else char
            if units and isinstance(units[-1], str):
                units[-1] += literal
            else:
                units.append(literal)
    return pieces


class TotalPredicate:
    """Checks that a condition is total (see the module docstring) and returns it with every literal in its
    engine-exact form.

    ``clause`` names the clause in messages; ``column_type`` gives the catalog type (``int``, ``float``,
    ``str``, ``bool``, ``date``, ``decimal``) of a column reference, refusing unknown columns itself,
    ``public_values`` its declared public values (``None``: not declared), which convert literals of
    another type (module docstring), and ``digits`` a decimal column's ``(precision, scale)``.
    """

    def __init__(
        self,
        clause: str,
        column_type: Callable[[exp.Column], str],
        dialect: str,
        public_values: Callable[[exp.Column], tuple[object, ...] | None] = lambda column: None,
        digits: Callable[[exp.Column], tuple[int, int] | None] = lambda column: None,
    ) -> None:
        self.clause = clause
        self.column_type = column_type
        self.dialect = dialect
        self.public_values = public_values
        self.digits = digits

    def check(self, predicate: exp.Expr) -> exp.Expression:
        """The rewritten predicate; :class:`QueryRefused` when it is not total."""
        return cast(exp.Expression, self._condition(predicate.copy()))

    # -- conditions ---------------------------------------------------------------------------------------

    def _condition(self, node: exp.Expr) -> exp.Expr:
        """``node`` checked, with its literals rewritten (a LIKE comes back wrapped in its ESCAPE)."""
        if isinstance(node, exp.Paren):
            node.set("this", self._condition(node.this))
        elif isinstance(node, (exp.And, exp.Or)):
            node.set("this", self._condition(node.this))
            node.set("expression", self._condition(node.expression))
        elif isinstance(node, exp.Not):
            node.set("this", self._condition(node.this))
        elif isinstance(node, exp.Boolean):
            pass
        elif isinstance(node, exp.Column):
            if self.column_type(node) != "bool":
                raise self._refuse(node, "only a bool column is a condition by itself")
        elif isinstance(node, COMPARISONS):
            listed = self._as_listed(node, node.this, node.expression)
            if listed is not None:
                return listed
            self._compare(node, "this", "expression")
        elif isinstance(node, exp.Between):
            listed = self._as_listed(node, node.this, node.args["low"], node.args["high"])
            if listed is not None:
                return listed
            self._compare(node, "this", "low")
            self._compare(node, "this", "high")
        elif isinstance(node, exp.In) and set(node.args) - {"this", "expressions"} <= {"is_global"}:
            if not node.expressions or any(node.args.get(k) for k in ("query", "unnest", "field")):
                raise self._refuse(node, "IN takes a list of literals")
            kind = self._operand(node, node.this)
            column = _column(node.this)
            node.set(
                "expressions", [self._literal_for(node, kind, item, column) for item in node.expressions]
            )
        elif isinstance(node, (exp.Like, exp.ILike)):
            return self._like(node)
        elif isinstance(node, exp.Escape):
            raise self._refuse(node, "LIKE patterns have no escape character here; drop ESCAPE")
        elif isinstance(node, exp.Is):
            self._operand(node, node.this)
            if not isinstance(strip(node.expression), (exp.Null, exp.Boolean)):
                raise self._refuse(node, "IS takes NULL, TRUE or FALSE")
        else:
            raise self._refuse(node, "it is not a comparison")
        return node

    def _compare(self, node: exp.Expr, left_key: str, right_key: str) -> None:
        """Both sides comparable; a literal facing a column rewritten in the column's exact form."""
        left, right = node.args[left_key], node.args[right_key]
        kinds = (self._operand(node, left), self._operand(node, right))
        if _is_column_kind(kinds[0]) and not _is_column_kind(kinds[1]):
            node.set(right_key, self._literal_for(node, kinds[0], right, _column(left)))
        elif _is_column_kind(kinds[1]) and not _is_column_kind(kinds[0]):
            node.set(left_key, self._literal_for(node, kinds[1], left, _column(right)))
        else:
            self._same_kind(node, set(kinds))

    def _as_listed(self, node: exp.Expr, operand: exp.Expr, *literals: exp.Expr) -> exp.Expr | None:
        """An order comparison or BETWEEN of a text column whose public values are numerals with numbers,
        as the IN list of the numerals that satisfy it (FALSE when none; module docstring), else None."""
        column, kind = _column(operand), type(node)
        if kind not in _ORDER:
            return None
        if column is None or self.column_type(column) != "str":  # ``2 < educ``: ``educ > 2``
            column, literals = _column(literals[0]) if len(literals) == 1 else None, (operand,)
            if column is None or self.column_type(column) != "str":
                return None
            kind = _FLIPPED[kind]
        numerals = _numerals(self.public_values(column))
        values = [None if is_text(literal) else numeric_literal(literal) for literal in literals]
        if numerals is None or any(v is None for v in values):
            return None
        test = _ORDER[kind]
        kept = [text for text, number in numerals if test(number, *cast(list[Fraction], values))]
        if not kept:
            return exp.false()
        return exp.In(this=column.copy(), expressions=[exp.Literal.string(text) for text in kept])

    def _same_kind(self, node: exp.Expr, kinds: set[str]) -> None:
        kinds = kinds - {"null"}
        if len(kinds) <= 1 or any(kinds <= same for same in _SAME_KIND):
            return
        shown = " and ".join(sorted(kinds))
        raise self._refuse(node, f"it compares {shown}, which the engine would convert row by row")

    def _literal_for(
        self, node: exp.Expr, kind: str, literal: exp.Expr, column: exp.Column | None = None
    ) -> exp.Expr:
        """``literal`` as the engine must see it next to a column of catalog type ``kind`` (``column``, whose
        public values may convert a literal of another type: module docstring)."""
        converted = self._converted(kind, literal, column)
        if converted is not None:
            literal = converted
        literal_kind = self._operand(node, literal)
        if literal_kind == "null" or _is_column_kind(literal_kind):
            self._same_kind(node, {kind, literal_kind})
            return literal
        if kind == "date" and literal_kind == "text":
            text = strip(literal).name
            if not is_iso_date(text):
                raise self._refuse(node, f"{text!r} is not an ISO date (YYYY-MM-DD)")
            return literal
        self._same_kind(node, {kind, literal_kind})
        value = numeric_literal(literal)
        if value is None:
            return literal
        shown = self._sql(literal)
        if kind == "int":
            if value.denominator != 1:
                raise self._refuse(node, f"{shown} is not a whole number, and the column holds integers")
            if not -INT_RANGE <= value < INT_RANGE:
                raise self._refuse(node, f"{shown} is beyond the 64-bit integer range")
            return exp.Literal.number(int(value))
        if kind == "float":
            if abs(value) > _LARGEST_DOUBLE:
                raise self._refuse(node, f"{shown} is beyond the range of a double")
            double = float(value)
            if 0 < abs(Fraction(double)) < _SMALLEST_NORMAL or (double == 0 and value != 0):
                raise self._refuse(node, f"{shown} is too close to zero for a double; compare with 0")
            return exp.Literal.number(double_text(double))
        if kind == "decimal":
            return exp.Literal.number(self._decimal_text(node, value, shown, column))
        return literal

    def _decimal_text(self, node: exp.Expr, value: Fraction, shown: str, column: exp.Column | None) -> str:
        """``value`` written exactly in the scale of the DECIMAL(p, s) ``column``: every engine reads
        ``12.50`` as an exact decimal of at most p digits and compares it with the column exactly, with no
        conversion and no precision to widen past 38 (a literal of more digits could make Spark cut the
        scale). A value the column cannot hold exactly is refused."""
        digits = None if column is None else self.digits(column)
        if digits is None:
            raise self._refuse(node, f"{shown} faces a decimal column kakeibo cannot tell the scale of")
        precision, scale = digits
        units = value * 10**scale
        if units.denominator != 1 or abs(units) >= 10**precision:
            raise self._refuse(
                node,
                f"{shown} is not a value of the column's DECIMAL({precision}, {scale}): write it with at "
                f"most {scale} digits after the point and {precision - scale} before",
            )
        whole, fraction = divmod(abs(units.numerator), 10**scale)
        text = f"{whole}.{fraction:0{scale}d}" if scale else str(whole)
        return ("-" if units < 0 else "") + text

    def _converted(self, kind: str, literal: exp.Expr, column: exp.Column | None) -> exp.Expr | None:
        """``literal`` converted to the type ``kind`` of its column where the module docstring's rules make
        the result unambiguous, else None (compared as it is, or refused)."""
        literal = strip(literal)
        value = numeric_literal(literal) if isinstance(literal, (exp.Literal, exp.Neg)) else None
        if kind == "str" and column is not None:
            declared = self.public_values(column)
            numerals = _numerals(declared)
            if numerals is not None and value is not None and value.denominator == 1:
                return exp.Literal.string(str(int(value)))
            truths = _truth_spellings(declared)
            if truths is not None and isinstance(literal, exp.Boolean):
                return exp.Literal.string(truths[0] if literal.this else truths[1])
        if (
            kind in ("int", "float", "decimal")
            and is_text(literal)
            and _PLAIN_NUMERAL.fullmatch(literal.name)
        ):
            return exp.Literal.number(literal.name.strip())
        if kind == "bool" and value in (0, 1) and not is_text(literal):
            return exp.Boolean(this=value == 1)
        if kind == "bool" and is_text(literal) and literal.name.lower() in ("true", "false"):
            return exp.Boolean(this=literal.name.lower() == "true")
        return None

    def _like(self, like: exp.Like | exp.ILike) -> exp.Expr:
        if self._operand(like, like.this) != "str" or not is_text(like.expression):
            raise self._refuse(like, "LIKE compares a text column with a text pattern")
        try:
            units = like_units(strip(like.expression).name, self.dialect)
        except CharacterClassError as exc:
            raise QueryRefused(
                f"{self.clause} {self._sql(like)} is refused: T-SQL LIKE character classes such as {exc} "
                "are not supported, since the LIKE of DuckDB, PostgreSQL and Spark has none; write IN (...) "
                "or LIKE conditions joined by OR instead (a class of one character, such as [%], is read as "
                "that character)."
            ) from None
        if len(units) > MAX_LIKE_CHARS:
            raise self._refuse(
                like,
                f"a LIKE pattern may have at most {MAX_LIKE_CHARS} characters, since the time to match each "
                "row grows with the pattern's length",
            )
        like.set("expression", exp.Literal.string("".join(units)))
        return exp.Escape(this=like, expression=exp.Literal.string(LIKE_ESCAPE))

    # -- operands -----------------------------------------------------------------------------------------

    def _operand(self, node: exp.Expr, operand: exp.Expr) -> str:
        """A column's catalog type, or "number" / "text" / "boolean" / "null" / "date" for a literal."""
        operand = strip(operand)
        if isinstance(operand, exp.Column):
            return self.column_type(operand)
        if isinstance(operand, (exp.Lower, exp.Upper)):  # total on text
            if self._operand(node, operand.this) not in ("str", "text"):
                raise self._refuse(node, "LOWER and UPPER take text")
            return "str"
        if (
            isinstance(operand, exp.Cast)
            and operand.to.is_type(exp.DataType.Type.DATE)
            and is_text(operand.this)
            and is_iso_date(strip(operand.this).name)
        ):  # DATE '2024-01-01'
            return "date_literal"
        if isinstance(operand, exp.Null):
            return "null"
        if isinstance(operand, exp.Boolean):
            return "boolean"
        if is_text(operand):
            return "text"
        if numeric_literal(operand) is not None:
            return "number"
        raise self._refuse(node, f"{self._sql(operand)} is not a column or a literal")

    def _refuse(self, node: exp.Expr, why: str) -> QueryRefused:
        return QueryRefused(
            f"{self.clause} {self._sql(node)} is not allowed ({why}): a condition may only compare columns "
            "with literals of their type, joined by AND, OR and NOT, since an expression the engine can "
            "fail on for some rows would tell, through the error and without noise, whether such rows "
            "exist."
        )

    def _sql(self, node: exp.Expr) -> str:
        return node.sql(dialect=self.dialect)


#: a numeral a text literal may be read as by a numeric column: plain decimal digits, a sign, a point
_PLAIN_NUMERAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")
#: a public value that reads as its whole number and nothing else (no sign but "-", no leading zero)
_WHOLE_NUMERAL = re.compile(r"0|-?[1-9]\d{0,17}")
#: the pairs of truth spellings a text column may declare as its public values, (true, false)
_TRUTHS = (("true", "false"), ("t", "f"), ("yes", "no"), ("y", "n"), ("1", "0"))
#: an order comparison (or BETWEEN) as a test of a public value's number against the literals' numbers
_ORDER: dict[type[exp.Expr], Callable[..., bool]] = {
    exp.GT: lambda v, a: v > a,
    exp.GTE: lambda v, a: v >= a,
    exp.LT: lambda v, a: v < a,
    exp.LTE: lambda v, a: v <= a,
    exp.Between: lambda v, low, high: low <= v <= high,
}
_FLIPPED: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LT,
    exp.GTE: exp.LTE,
    exp.LT: exp.GT,
    exp.LTE: exp.GTE,
}


def _column(node: exp.Expr) -> exp.Column | None:
    node = strip(node)
    return node if isinstance(node, exp.Column) else None


def _numerals(declared: tuple[object, ...] | None) -> list[tuple[str, Fraction]] | None:
    """The public values with their numbers, when every one is a whole numeral written plainly."""
    if not declared or not all(isinstance(v, str) and _WHOLE_NUMERAL.fullmatch(v) for v in declared):
        return None
    return [(str(v), Fraction(int(str(v)))) for v in declared]


def _truth_spellings(declared: tuple[object, ...] | None) -> tuple[str, str] | None:
    """The (true, false) spellings a text column's public values are, in their case, if they are a pair."""
    if declared is None or len(declared) != 2 or not all(isinstance(v, str) for v in declared):
        return None
    for true, false in _TRUTHS:
        for spell in (str.lower, str.upper, str.capitalize):
            if set(declared) == {spell(true), spell(false)}:
                return spell(true), spell(false)
    return None


def _is_column_kind(kind: str) -> bool:
    """Whether ``kind`` is a catalog column type (as opposed to a literal's kind)."""
    return kind in ("int", "float", "decimal", "str", "bool", "date")
