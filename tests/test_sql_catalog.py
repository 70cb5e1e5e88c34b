"""The catalog: TOML and Python construction, defaults, and validation of every privacy setting."""

from __future__ import annotations

import dataclasses
import datetime
import pickle
from pathlib import Path

import pytest

from kakeibo.sql import Catalog, ColumnSpec, QueryRefused, TableSpec

ISSUE_EXAMPLE = """
[tables.visits]
privacy_unit = "user_id"          # omit for row-level privacy (each row is a person)
max_partitions = 3
max_rows_per_partition = 5
[tables.visits.columns]
user_id  = { type = "int" }
category = { type = "str" }                                   # public_values = [...] optional
amount   = { type = "float", lower = 0, upper = 100 }
age      = { type = "int", lower = 0, upper = 120, user_constant = true }
"""


def test_issue_example_loads_with_every_setting() -> None:
    catalog = Catalog.from_toml(ISSUE_EXAMPLE)
    visits = catalog.table("visits")
    assert visits.privacy_unit == "user_id"
    assert (visits.max_partitions, visits.max_rows_per_partition) == (3, 5)
    assert not visits.public and visits.source is None and not visits.row_level
    assert list(visits.columns) == ["user_id", "category", "amount", "age"]
    assert visits.column("user_id") == ColumnSpec("user_id", "int")
    assert visits.column("category") == ColumnSpec("category", "str")
    amount = visits.column("amount")
    assert (amount.type, amount.lower, amount.upper, amount.user_constant) == ("float", 0.0, 100.0, False)
    assert isinstance(amount.lower, float)
    age = visits.column("age")
    assert (age.type, age.lower, age.upper, age.user_constant) == ("int", 0, 120, True)
    assert isinstance(age.lower, int)


def test_row_level_public_and_source_tables(tmp_path: Path) -> None:
    text = """
    [tables.people]
    source = "people.csv"
    [tables.people.columns]
    age = { type = "int", lower = 0, upper = 120 }
    city = "str"

    [tables.cities]
    public = true
    source = "/data/cities.parquet"
    [tables.cities.columns]
    city = "str"
    country = { type = "str", public_values = ["JP", "FR"] }
    """
    path = tmp_path / "catalog.toml"
    path.write_text(text, encoding="utf-8")
    from_file = Catalog.from_toml(path)
    people, cities = from_file.table("people"), from_file.table("cities")
    assert people.row_level and people.privacy_unit is None
    assert (people.max_partitions, people.max_rows_per_partition) == (1, 1)
    # a relative source is read relative to the catalog file, an absolute one is kept
    assert people.source == str(tmp_path.resolve() / "people.csv")
    assert cities.public and cities.source == "/data/cities.parquet"
    assert cities.column("country").public_values == ("JP", "FR")
    # from text, relative sources stay as written; the path may also be passed as a str
    assert Catalog.from_toml(text).table("people").source == "people.csv"
    assert Catalog.from_toml(str(path)) == from_file


def test_from_dict_matches_toml_and_round_trips() -> None:
    catalog = Catalog.from_toml(ISSUE_EXAMPLE)
    assert Catalog.from_dict(catalog.to_dict()) == catalog
    data = {
        "tables": {
            "visits": {
                "privacy_unit": "user_id",
                "max_partitions": 3,
                "max_rows_per_partition": 5,
                "columns": {
                    "user_id": "int",
                    "category": {"type": "str"},
                    "amount": {"type": "float", "lower": 0, "upper": 100},
                    "age": {"type": "int", "lower": 0, "upper": 120, "user_constant": True},
                },
            }
        }
    }
    assert Catalog.from_dict(data) == catalog
    assert catalog.to_dict()["tables"]["visits"]["columns"]["age"] == {
        "type": "int",
        "lower": 0,
        "upper": 120,
        "user_constant": True,
    }


def test_python_construction_and_lookups_are_case_insensitive() -> None:
    unit = ColumnSpec("User_ID", "int")
    day = ColumnSpec("Day", "date", public_values=("2024-01-02", datetime.date(2024, 1, 3)))
    table = TableSpec("Visits", {"User_ID": unit, "day": day}, privacy_unit="USER_ID", max_partitions=2)
    catalog = Catalog([table])
    assert table.name == "visits" and table.privacy_unit == "user_id"
    assert list(table.columns) == ["user_id", "day"]
    assert catalog.table("VISITS") is table
    assert table.column("DAY").public_values == (datetime.date(2024, 1, 2), datetime.date(2024, 1, 3))
    assert table.has_column("User_Id") and not table.has_column("amount")
    assert list(catalog.tables) == ["visits"]


def test_unknown_table_and_column_are_query_refusals() -> None:
    catalog = Catalog.from_toml(ISSUE_EXAMPLE)
    with pytest.raises(QueryRefused, match=r"unknown table 'payments'; the catalog has: visits\."):
        catalog.table("Payments")
    with pytest.raises(QueryRefused, match=r"table visits has no column 'height'\."):
        catalog.table("visits").column("HEIGHT")
    assert issubclass(QueryRefused, ValueError)


def test_specs_are_immutable_hashable_and_picklable() -> None:
    catalog = Catalog.from_toml(ISSUE_EXAMPLE)
    visits = catalog.table("visits")
    with pytest.raises(dataclasses.FrozenInstanceError):
        visits.max_partitions = 10  # type: ignore[misc]
    with pytest.raises(TypeError):
        visits.columns["amount"] = ColumnSpec("amount", "float")  # type: ignore[index]
    assert hash(visits) == hash(Catalog.from_toml(ISSUE_EXAMPLE).table("visits"))
    assert pickle.loads(pickle.dumps(catalog)) == catalog
    assert dataclasses.replace(visits, max_partitions=4).max_partitions == 4


def test_float_public_values_make_grouping_keys() -> None:
    spec = ColumnSpec("bucket", "float", lower=0, upper=1, public_values=[0, 0.5, 1])
    assert spec.public_values == (0.0, 0.5, 1.0)
    assert all(isinstance(v, float) for v in spec.public_values)


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"type": "float", "lower": 0}, ValueError, "needs both lower and upper bounds, or neither"),
        ({"type": "float", "upper": 1}, ValueError, "needs both lower and upper bounds, or neither"),
        ({"type": "float", "lower": 5, "upper": 1}, ValueError, "lower bound 5 above its upper bound 1"),
        ({"type": "float", "lower": float("-inf"), "upper": 1}, ValueError, "must be a finite number"),
        ({"type": "float", "lower": float("nan"), "upper": 1}, ValueError, "must be a finite number"),
        ({"type": "float", "lower": True, "upper": 1}, ValueError, "must be a finite number"),
        (
            {"type": "str", "lower": 0, "upper": 1},
            ValueError,
            "only int, float and decimal columns take bounds",
        ),
        (
            {"type": "date", "lower": 0, "upper": 1},
            ValueError,
            "the lower bound of date column 'c' is a date (YYYY-MM-DD), got 0",
        ),
        ({"type": "int", "lower": 0.5, "upper": 10}, ValueError, "must be a whole number"),
        ({"type": "numeric"}, ValueError, "the types are int, float, str, bool, date, decimal"),
        ({"type": "int", "public_values": ()}, ValueError, "is empty"),
        ({"type": "int", "public_values": (1, 1)}, ValueError, "lists a value twice"),
        ({"type": "int", "public_values": (1, "2")}, ValueError, "'2' of column 'c' is not a valid int"),
        ({"type": "int", "public_values": (True,)}, ValueError, "is not a valid int"),
        ({"type": "str", "public_values": (1,)}, ValueError, "is not a valid str"),
        ({"type": "bool", "public_values": (1,)}, ValueError, "is not a valid bool"),
        ({"type": "date", "public_values": ("2024-13-01",)}, ValueError, "is not a valid date"),
        ({"type": "float", "public_values": (float("inf"),)}, ValueError, "is not a valid float"),
        ({"type": "str", "public_values": "abc"}, TypeError, "must be a list of values"),
        ({"type": "int", "user_constant": "yes"}, TypeError, "user_constant of column 'c'"),
    ],
)
def test_column_validation(kwargs: dict[str, object], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        ColumnSpec("c", **kwargs)  # type: ignore[arg-type]


def _table(**settings: object) -> dict[str, object]:
    return {"tables": {"t": {"columns": {"uid": "int", "x": "float"}, **settings}}}


@pytest.mark.parametrize(
    ("data", "error", "fragment"),
    [
        (_table(max_partitions=3), ValueError, "row-level privacy (no privacy_unit)"),
        (_table(max_rows_per_partition=2), ValueError, "max_partitions and max_rows_per_partition must be 1"),
        (
            _table(privacy_unit="uid", max_partitions=0),
            ValueError,
            "max_partitions of table 't' must be a pos",
        ),
        (_table(privacy_unit="uid", max_rows_per_partition=-1), ValueError, "must be a positive integer"),
        (_table(privacy_unit="uid", max_partitions=2.5), ValueError, "must be a positive integer"),
        (_table(privacy_unit="uid", max_partitions=True), ValueError, "must be a positive integer"),
        (
            _table(privacy_unit="person"),
            ValueError,
            "privacy_unit 'person' of table 't' is not one of its col",
        ),
        (_table(privacy_unit="uid", public=True), ValueError, "is public, so it cannot have a privacy_unit"),
        (_table(public="yes"), TypeError, "public of table 't' must be true or false"),
        (_table(source=3), TypeError, "source of table 't' must be a file path"),
        (_table(max_partition=3), ValueError, "unknown key(s) max_partition in table t"),
        (
            {"tables": {"t": {"columns": {"x": {"type": "float", "uper": 1}}}}},
            ValueError,
            "unknown key(s) uper",
        ),
        (
            {"tables": {"t": {"columns": {"x": {"lower": 1}}}}},
            ValueError,
            "column 'x' of table 't' has no type",
        ),
        ({"tables": {"t": {"columns": {"x": 3}}}}, TypeError, "must be a type name or a table of settings"),
        ({"tables": {"t": {"columns": {}}}}, ValueError, "needs a [tables.t.columns] section"),
        ({"tables": {"t": {}}}, ValueError, "needs a [tables.t.columns] section"),
        ({"tables": {"t": "visits"}}, TypeError, "table 't' must be a table of settings"),
        ({"tables": {}}, ValueError, "the catalog declares no tables"),
        ({"table": {}}, ValueError, "unknown key(s) table in the catalog"),
        ({"tables": {"t": {"columns": {"x": "int", "X": "int"}}}}, ValueError, "declares column 'x' twice"),
        ({"tables": {"t": {"columns": {"x": "int"}}, "T": {"columns": {"x": "int"}}}}, ValueError, "twice"),
    ],
)
def test_catalog_validation(data: dict[str, object], error: type[Exception], fragment: str) -> None:
    escaped = fragment.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(error, match=escaped):
        Catalog.from_dict(data)


def test_table_spec_checks_its_columns_mapping() -> None:
    x = ColumnSpec("x", "int")
    with pytest.raises(ValueError, match="column key 'y' of table 't' does not match its name 'x'"):
        TableSpec("t", {"y": x})
    with pytest.raises(ValueError, match="table 't' declares no columns"):
        TableSpec("t", {})
    with pytest.raises(TypeError, match="must be a ColumnSpec"):
        TableSpec("t", {"x": "int"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="a table name must be a non-empty string"):
        TableSpec("", {"x": x})
    with pytest.raises(TypeError, match="a Catalog holds TableSpec objects"):
        Catalog(["t"])  # type: ignore[list-item]


def test_toml_path_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Catalog.from_toml(str(tmp_path / "missing.toml"))
    with pytest.raises(ValueError):  # tomllib.TOMLDecodeError is a ValueError
        Catalog.from_toml("[tables.t\ncolumns = 1")
