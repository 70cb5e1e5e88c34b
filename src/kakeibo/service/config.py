"""The query service's configuration file (TOML). Paths are relative to the file::

    [service]
    ledger = "ledger.sqlite"            # the privacy ledger (created if missing)
    registry = "analysts.sqlite"        # analysts, key digests and grants (created if missing)
    # Several replicas share one ledger and registry in PostgreSQL instead (both may name one database):
    # ledger = "postgresql://kakeibo:PASSWORD@db.internal:5432/kakeibo"
    admin_key_hash = "scrypt$...$..."   # `kakeibo hash-key` prints it for a key read from stdin
    max_body_bytes = 65536              # larger request bodies get 413
    requests_per_minute = 600           # per API key; more get 429
    failed_auth_per_minute = 30         # bad keys per client address; then 429 before any key check
    delta = "1e-6"                      # default delta of queries that need private partition selection

    [datasets.visits]
    engine = "duckdb"                   # "duckdb" (the default), "postgres" or "spark"
    database = "visits.duckdb"          # DuckDB file (":memory:" with the catalog's `source` files);
                                        # postgres: a postgresql:// URL; spark: the master ("local[2]",
                                        # "spark://host:7077"), tables from the catalog's `source` files
    catalog = "catalog.toml"
    budget = 10                         # epsilon for ALL analysts together (colluders cannot exceed it)
    delta_budget = "1e-5"               # their delta, for GROUP BY without public keys (default 0: none)

Unknown keys are refused, so a typo in a privacy setting cannot pass silently.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..accounting.storage import is_postgres_url
from ..errors import ConfigurationError
from ..privacy import as_fraction
from ..sql.catalog import refuse_unknown_keys
from .registry import check_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["DatasetConfig", "ServiceConfig"]

_SERVICE_KEYS = frozenset(
    {
        "ledger",
        "registry",
        "admin_key_hash",
        "max_body_bytes",
        "requests_per_minute",
        "failed_auth_per_minute",
        "delta",
    }
)
_DATASET_KEYS = frozenset({"engine", "database", "catalog", "budget", "delta_budget"})
_ENGINES = ("duckdb", "postgres", "spark")


@dataclass(frozen=True)
class DatasetConfig:
    """One dataset the service answers queries on: its engine and database, catalog and global budget
    (``budget`` epsilon and ``delta_budget`` delta, for all analysts together)."""

    name: str
    database: str  # DuckDB path or ":memory:", PostgreSQL URL, or Spark master
    catalog: Path
    budget: Fraction
    delta_budget: Fraction = Fraction(0)
    engine: str = "duckdb"


@dataclass(frozen=True)
class ServiceConfig:
    """Everything ``kakeibo serve`` needs (see the module docstring)."""

    ledger: str  # a SQLite path or a postgresql:// URL
    registry: str
    admin_key_hash: str
    datasets: Mapping[str, DatasetConfig]
    max_body_bytes: int = 65536
    requests_per_minute: int = 600
    failed_auth_per_minute: int = 30
    delta: Fraction = Fraction(1, 10**6)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> ServiceConfig:
        file = Path(path)
        with file.open("rb") as handle:
            data = tomllib.load(handle)
        return cls.from_dict(data, base=file.resolve().parent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: Path) -> ServiceConfig:
        refuse_unknown_keys(data, frozenset({"service", "datasets"}), "the service configuration")
        service = data.get("service")
        if not isinstance(service, Mapping):
            raise ConfigurationError("the service configuration needs a [service] section.")
        refuse_unknown_keys(service, _SERVICE_KEYS, "[service]")
        for key in ("ledger", "registry", "admin_key_hash"):
            if not isinstance(service.get(key), str) or not service[key]:
                raise ConfigurationError(f"[service] needs {key} (a string).")
        if not service["admin_key_hash"].startswith("scrypt$"):
            raise ConfigurationError("[service] admin_key_hash must be the output of `kakeibo hash-key`.")
        datasets = data.get("datasets")
        if not isinstance(datasets, Mapping) or not datasets:
            raise ConfigurationError(
                "the service configuration declares no datasets; add a [datasets.NAME] section."
            )
        return cls(
            ledger=_location(service["ledger"], base),
            registry=_location(service["registry"], base),
            admin_key_hash=service["admin_key_hash"],
            datasets={name: _dataset(name, spec, base) for name, spec in datasets.items()},
            max_body_bytes=_positive_int(service.get("max_body_bytes", 65536), "max_body_bytes"),
            requests_per_minute=_positive_int(service.get("requests_per_minute", 600), "requests_per_minute"),
            failed_auth_per_minute=_positive_int(
                service.get("failed_auth_per_minute", 30), "failed_auth_per_minute"
            ),
            delta=as_fraction(service.get("delta", "1e-6"), "delta"),
        )


def _dataset(name: str, spec: object, base: Path) -> DatasetConfig:
    check_name(name, "a dataset name", error=ConfigurationError)
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"[datasets.{name}] must be a table of settings.")
    refuse_unknown_keys(spec, _DATASET_KEYS, f"[datasets.{name}]")
    if not isinstance(spec.get("catalog"), str) or "budget" not in spec:
        raise ConfigurationError(f"[datasets.{name}] needs catalog (a path) and budget (an epsilon).")
    engine = spec.get("engine", "duckdb")
    if engine not in _ENGINES:
        raise ConfigurationError(
            f"[datasets.{name}] engine must be one of {', '.join(_ENGINES)}, not {engine!r}."
        )
    database = spec.get("database", ":memory:" if engine == "duckdb" else None)
    if not isinstance(database, str) or not database:
        needs = {"postgres": "a postgresql:// URL", "spark": "the Spark master, such as local[2]"}
        raise ConfigurationError(
            f"[datasets.{name}] database must be {needs.get(engine, 'a path or :memory:')}."
        )
    if engine == "postgres" and not is_postgres_url(database):
        raise ConfigurationError(
            f"[datasets.{name}] database must be a postgresql:// URL for engine postgres."
        )
    budget = as_fraction(spec["budget"], f"the budget of dataset {name}")
    if budget <= 0:
        raise ConfigurationError(f"the budget of dataset {name} must be positive.")
    delta_budget = as_fraction(spec.get("delta_budget", 0), f"the delta_budget of dataset {name}")
    if not 0 <= delta_budget < 1:
        raise ConfigurationError(f"the delta_budget of dataset {name} must be at least 0 and below 1.")
    return DatasetConfig(
        name=name,
        database=str(_path(database, base)) if engine == "duckdb" and database != ":memory:" else database,
        catalog=_path(spec["catalog"], base),
        budget=budget,
        delta_budget=delta_budget,
        engine=engine,
    )


def _location(text: str, base: Path) -> str:
    """A ``postgresql://`` URL as it is, else a SQLite path relative to the configuration file."""
    return text if is_postgres_url(text) else str(_path(text, base))


def _path(text: str, base: Path) -> Path:
    path = Path(text)
    return path if path.is_absolute() else base / path


def _positive_int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"[service] {key} must be a positive integer, got {value!r}.")
    return value
