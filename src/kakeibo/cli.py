"""The ``kakeibo`` command line.

* ``kakeibo --version`` -- print ``kakeibo <version>``.
* ``kakeibo ledger show PATH`` -- the ledger's budgets (with spent and remaining) and its entries.
* ``kakeibo ledger verify PATH`` -- re-check the hash chains; exit 0 if intact, 1 listing the problems.
* ``kakeibo sql --database FILE --catalog FILE --ledger FILE (--epsilon E | --accuracy ALPHA BETA)
  [--format json] "SELECT ..."`` --
  answer a query with DP on DuckDB, charged to the ledger; a refused query exits 1 with the reason.
* ``kakeibo explain --database FILE --catalog FILE [--epsilon E] "SELECT ..."`` -- the plan, before spending.
* ``kakeibo repro bdp [--out DIR] [--quick]`` -- regenerate seed 001's figures (leakage of the Gaussian
  correlation model on random networks and on ego-Facebook) and check the paper's claims on them.
* ``kakeibo repro supml --dataset wdbc|ionosphere [--out DIR] [--quick] [--jobs N]`` -- seed 004's sweep
  (SUP.ML, WALDP, the PM baseline and raw data, 10-fold CV): print the result table, write it as CSV and
  Parquet with figures and claims.txt.
* ``kakeibo serve --config FILE [--host H] [--port P]`` -- the DP SQL query service over HTTP
  (:mod:`kakeibo.service`; needs ``pip install 'kakeibo[service]'``).
* ``kakeibo hash-key [--new]`` -- the salted hash of a key read from stdin, for ``admin_key_hash`` (with
  ``--new``: make a fresh key, print it and its hash).

Exit status 1 means the answer is no: a query refused (over budget, a repeated request id, or a rule it
breaks), a statement past its time limit or a release that failed after its draw (both charged), a ledger
that fails verification. Exit status 2 means the command could not run: bad arguments, no such ledger or
database, a misconfigured catalog or ledger, an engine error. :func:`_failure` is the one map from
kakeibo's error tree (:mod:`kakeibo.errors`) to these statuses, with a one-line message and no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from . import __version__
from .accounting import BudgetExceeded, Ledger, LedgerEntry, Scope
from .accounting.ledger import DuplicateRequest
from .errors import Error, ReleaseFailed, StatementTimeout

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kakeibo", description="Differential privacy around an auditable privacy-budget ledger."
    )
    parser.add_argument("--version", action="version", version=f"kakeibo {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    ledger = commands.add_parser("ledger", help="inspect a privacy-budget ledger")
    actions = ledger.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser("show", help="print budgets, spending and entries")
    show.add_argument("path", metavar="PATH", help="the ledger's SQLite file")
    verify = actions.add_parser("verify", help="check the hash chains (exit 1 if tampered)")
    verify.add_argument("path", metavar="PATH", help="the ledger's SQLite file")
    for name, text in (
        ("sql", "answer a query with differential privacy"),
        ("explain", "show a query's plan"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--database", required=True, help="DuckDB file (':memory:' with catalog sources)")
        sub.add_argument("--catalog", required=True, help="catalog TOML file")
        spend = sub.add_mutually_exclusive_group()
        spend.add_argument("--epsilon", type=float, default=None, help="privacy loss of the query")
        spend.add_argument(
            "--accuracy",
            type=float,
            nargs=2,
            metavar=("ALPHA", "BETA"),
            default=None,
            help="spend the least epsilon that keeps each COUNT/SUM within ALPHA with probability 1 - BETA",
        )
        sub.add_argument("--delta", type=float, default=None, help="for private partition selection")
        sub.add_argument(
            "--bounds",
            type=_bounds,
            default=None,
            metavar="JSON",
            help='this query\'s own limits and column bounds (numbers or "auto"), e.g. '
            '\'{"max_partitions": 3, "amount": "auto"}\'',
        )
        sub.add_argument(
            "--outside-view",
            choices=("refuse", "charge"),
            default="refuse",
            help="a query over a view that the view cannot answer: refuse it, or run it on the view's table "
            "(charged)",
        )
        if name == "sql":
            _ledger_arguments(sub)
            sub.add_argument("--format", choices=("table", "json"), default="table")
        sub.add_argument("query", metavar="QUERY")
    view = commands.add_parser("view", help="build a view (charged once) or list the views built")
    view_actions = view.add_subparsers(dest="action", metavar="ACTION")
    create = view_actions.add_parser("create", help="release a view of SELECT col, ... FROM table")
    listing = view_actions.add_parser("list", help="the views in the ledger over this database")
    for sub in (create, listing):
        sub.add_argument("--database", required=True, help="DuckDB file (':memory:' with catalog sources)")
        sub.add_argument("--catalog", required=True, help="catalog TOML file")
        _ledger_arguments(sub)
    create.add_argument("--epsilon", type=float, required=True, help="privacy loss of the view")
    create.add_argument(
        "--rows-per-person",
        type=_rows_per_person,
        default=1,
        help='rows of each person the view keeps, or "auto" to choose them privately (a share of --epsilon)',
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument("query", metavar="QUERY")
    repro = commands.add_parser("repro", help="reproduce a paper's experiments")
    experiments = repro.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    bdp = experiments.add_parser("bdp", help="seed 001: Bayesian DP leakage figures (needs matplotlib)")
    bdp.add_argument("--out", default="repro-bdp", help="directory for the PNG figures and claims.txt")
    bdp.add_argument("--quick", action="store_true", help="small networks: a smoke run in seconds")
    serve = commands.add_parser("serve", help="run the DP SQL query service (HTTP)")
    serve.add_argument("--config", required=True, help="the service's TOML configuration")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    hashing = commands.add_parser("hash-key", help="print the salted hash of a key read from stdin")
    hashing.add_argument("--new", action="store_true", help="make a fresh key and print it with its hash")
    supml = experiments.add_parser("supml", help="seed 004: SUP.ML / WALDP on WDBC or Ionosphere")
    supml.add_argument("--dataset", choices=("wdbc", "ionosphere"), required=True)
    supml.add_argument("--out", default=None, help="output directory (default repro-supml-DATASET)")
    supml.add_argument("--quick", action="store_true", help="a small grid: a smoke run")
    supml.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    supml.add_argument("--seed", type=int, default=0, help="shuffle and noise seed (default 0)")
    return parser


def _repro(args: argparse.Namespace) -> int:
    from pathlib import Path

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("kakeibo: the figures need matplotlib: pip install 'kakeibo[repro]'", file=sys.stderr)
        return 2
    if args.experiment == "supml":
        from .ml.repro import reproduce as reproduce_supml

        out = Path(args.out or f"repro-supml-{args.dataset}")
        print(reproduce_supml(args.dataset, out, quick=args.quick, seed=args.seed, n_jobs=args.jobs))
        return 0
    from .correlated.repro import reproduce

    lines = reproduce(Path(args.out), quick=args.quick)
    print("\n".join(lines))
    print(f"figures and claims.txt written to {args.out}")
    return 0 if all(line.startswith("[ok]") for line in lines) else 1


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .service import ServiceConfig, create_app
    except ImportError:
        message = "kakeibo: the service needs FastAPI and uvicorn: pip install 'kakeibo[service]'"
        print(message, file=sys.stderr)
        return 2
    config = ServiceConfig.from_toml(args.config)
    uvicorn.run(create_app(config), host=args.host, port=args.port)
    return 0


def _hash_key(args: argparse.Namespace) -> int:
    from .service.registry import hash_key, new_key

    if args.new:
        key = new_key()[0]
        print(f"key:  {key}\nhash: {hash_key(key)}")
        return 0
    key = sys.stdin.readline().strip()
    if not key:
        print("kakeibo: give the key on stdin (or --new for a fresh one)", file=sys.stderr)
        return 2
    print(hash_key(key))
    return 0


def _ledger_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--ledger", required=True, help="ledger SQLite file")
    sub.add_argument("--budget", type=float, default=None, help="epsilon budget of a new ledger")


def _rows_per_person(text: str) -> int | str:
    """``--rows-per-person``: a whole number, or ``auto`` (the session checks the value)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'a whole number or "auto", got {text!r}') from None


def _view(args: argparse.Namespace) -> int:
    from .sql import connect

    with connect(args.database, catalog=args.catalog, ledger=args.ledger, budget=args.budget) as session:
        if args.action == "create":
            built = session.create_view(
                args.name, args.query, epsilon=args.epsilon, rows_per_person=args.rows_per_person
            )
            print(built.view.describe())
            return 0
        for stored in session.views().values():
            print(stored.describe())
    return 0


def _bounds(text: str) -> dict[str, object]:
    """The ``--bounds`` JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"--bounds is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('--bounds must be a JSON object such as {"max_partitions": 3}')
    return value


def _sql(args: argparse.Namespace) -> int:
    from .sql import connect

    ledger = getattr(args, "ledger", None) or ":memory:"
    budget = getattr(args, "budget", None) or (args.epsilon or 1 if ledger == ":memory:" else None)
    spend = {"epsilon": args.epsilon, "accuracy": None if args.accuracy is None else tuple(args.accuracy)}
    with connect(args.database, catalog=args.catalog, ledger=ledger, budget=budget) as session:
        where = {"delta": args.delta, "bounds": args.bounds, "outside_view": args.outside_view}
        if args.command == "explain":
            print(session.explain(args.query, **where, **spend))
            return 0
        if args.epsilon is None and args.accuracy is None and session.view_of(args.query) is None:
            print(
                "kakeibo: give --epsilon or --accuracy (only a query over a view needs neither)",
                file=sys.stderr,
            )
            return 2
        released = session.sql(args.query, **where, **spend)
        result = released.to_pandas()
    if released.bounds is not None:  # what was chosen privately, beside the table (stdout stays the answer)
        print(f"bounds {released.bounds.describe()}", file=sys.stderr)
    if released.note is not None:  # what a view's answer counts, beside it too
        print(f"note {released.note}", file=sys.stderr)
    if args.format == "json":
        print(result.to_json(orient="records"))
    else:
        print(result.to_string(index=False))
    return 0


def _failure(error: BaseException) -> tuple[int, str] | None:
    """The exit status and the one-line message for ``error``, or ``None`` for a bug (raised again, with its
    traceback). The tree is read first (see the module docstring); an engine's own message is never
    printed, since it may quote a data value."""
    if isinstance(error, Error):
        from .sql import QueryRefused

        if isinstance(error, QueryRefused):
            return 1, f"query refused: {error}"
        if isinstance(error, (BudgetExceeded, DuplicateRequest, ReleaseFailed)):
            return 1, str(error)
        if isinstance(error, StatementTimeout):
            return 1, f"{error} Its cost was charged."
        return 2, str(error)  # ConfigurationError, StoreError, LedgerIntegrityError and the rest
    engine = tuple(
        getattr(sys.modules[name], kind)
        for name, kind in (("duckdb", "Error"), ("pyarrow", "ArrowException"))
        if name in sys.modules  # loaded by whatever raised; never imported here
    )
    if isinstance(error, engine):
        return 2, f"the engine could not run this ({type(error).__name__}); nothing was charged."
    if isinstance(error, RecursionError):
        return 2, "the query is nested too deeply to check; nothing was charged."
    if isinstance(error, (OSError, ValueError, TypeError)):  # files, and parameter checks below kakeibo's
        return 2, str(error)
    if isinstance(error, ImportError):  # an optional dependency (pandas for the table): the message names it
        return 2, str(error)
    return None


def _table(rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out
        )


def _scope_name(scope: Scope) -> str:
    return " ".join(scope.parts("{kind}={name}")) or "global"


def _entry_row(entry: LedgerEntry) -> list[str]:
    return [
        str(entry.seq),
        entry.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        str(entry.loss),
        entry.label,
        entry.analyst or "-",
        entry.dataset or "-",
        entry.request_id or "-",
        "-" if entry.region is None else str(entry.region),
    ]


def _show(ledger: Ledger, out: TextIO) -> int:
    entries = ledger.entries()
    print(f"ledger      {ledger.path}", file=out)
    config = ledger.composition.config()
    extra = ", ".join(f"{k}={v}" for k, v in sorted(config.items()) if k != "name")
    print(f"composition {config['name']}" + (f" ({extra})" if extra else ""), file=out)
    print(f"entries     {len(entries)}", file=out)
    print(f"head hash   {ledger.head_hash}", file=out)
    print(file=out)
    rows = [["scope", "budget", "spent", "remaining"]]
    for scope, budget in sorted(ledger.budgets().items(), key=lambda kv: _scope_name(kv[0])):
        spent = ledger.spent(scope.analyst, scope.dataset)
        remaining = ledger.remaining(scope.analyst, scope.dataset)
        rows.append([_scope_name(scope), str(budget), str(spent), str(remaining)])
    _table(rows, out)
    print(file=out)
    if entries:
        header = ["seq", "created (UTC)", "loss", "label", "analyst", "dataset", "request id", "region"]
        _table([header, *(_entry_row(entry) for entry in entries)], out)
    else:
        print("no entries", file=out)
    return 0


def _verify(ledger: Ledger, out: TextIO) -> int:
    result = ledger.verify()
    if result:
        print(f"ok: {result.entries} entries, hash chain intact, head {ledger.head_hash}", file=out)
        return 0
    print(f"FAILED: {len(result.problems)} problem(s) in {ledger.path}", file=out)
    for problem in result.problems:
        print(f"  - {problem}", file=out)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _command(parser, args)
    except Exception as error:
        failure = _failure(error)
        if failure is None:
            raise
        status, message = failure
        print(f"kakeibo: {message}", file=sys.stderr)
        return status


def _command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command in ("sql", "explain"):
        return _sql(args)
    if args.command == "view" and args.action is not None:
        return _view(args)
    if args.command == "serve":
        return _serve(args)
    if args.command == "hash-key":
        return _hash_key(args)
    if args.command == "repro" and args.experiment in ("bdp", "supml"):
        return _repro(args)
    if args.command != "ledger" or args.action is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        ledger = Ledger(args.path)
    except FileNotFoundError:
        print(f"kakeibo: there is no ledger at {args.path}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as exc:
        if args.action == "verify":  # a ledger too damaged to open has failed verification
            print(f"FAILED: cannot open {args.path}: {exc}")
            return 1
        print(f"kakeibo: cannot open {args.path}: {exc}", file=sys.stderr)
        return 2
    with ledger:
        if args.action == "verify":
            return _verify(ledger, sys.stdout)
        try:
            return _show(ledger, sys.stdout)
        except Exception as exc:  # a damaged ledger: say so, and point at verify
            print(f"kakeibo: cannot show {args.path} ({exc}); run `kakeibo ledger verify`.", file=sys.stderr)
            return 1


if __name__ == "__main__":
    raise SystemExit(main())
