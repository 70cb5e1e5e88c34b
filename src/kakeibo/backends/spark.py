"""Apache Spark: run kakeibo's statements with Spark SQL through PySpark.

Local mode and clusters
-----------------------
``SparkBackend()`` starts an in-process local Spark (``master="local[2]"``: driver and two worker
threads in one JVM; ``"local[*]"`` uses every core). A standalone cluster is ``master="spark://host:7077"``
(YARN: ``"yarn"``, Kubernetes: ``"k8s://https://host:443"``); the driver then runs here and the
executors there, so the executors must be able to reach this machine (set ``spark.driver.host`` in
``conf`` when the default address is wrong) and the cluster must run the same Spark version as the
installed ``pyspark``. No Python is needed on the executors: queries run as Spark SQL in the JVM, data
goes in and out as Arrow. To use a session built elsewhere (Spark Connect's
``SparkSession.builder.remote("sc://host:15002")``, Databricks, a notebook's ``spark``) pass it as
``session``: the backend works in a new session of it, and :meth:`SparkBackend.close` leaves it running.

Needs ``pyspark`` (4.x: Arrow in and out without pandas; 3.x goes through pandas) and a Java runtime
(Java 17 or 21 for Spark 4) on ``PATH`` or in ``JAVA_HOME``.

Startup
-------
Creating the session costs seconds (a JVM starts). In local mode the backend trims what it can: no web
UI, no console progress bar, the driver bound to loopback, shuffles into as many partitions as there
are local threads (Spark's default of 200 is for clusters and makes every ``GROUP BY`` run 200 tasks),
JVM/Spark start-up messages below ``log_level`` silenced, and the JIT limited to its quick first tier
(``quick_jit``). ``conf`` entries override all of these.

One process, several backends
-----------------------------
A JVM holds one SparkContext, so every backend in a process runs on the first one started (a later
``master`` is ignored), but each works in a Spark session of its own (``SparkSession.newSession()``):
its own temporary views and SQL settings. The tables of :meth:`SparkBackend.load_table` and
:meth:`SparkBackend.register_source` are temporary views of that session, so two backends (two datasets
of the query service) never read each other's tables, whatever order they are made, loaded or closed
in. Closing a backend drops its views; the context stops when the last open backend on a context that a
backend started is closed (one started elsewhere is left running).

Before a statement runs, Spark's own parser reads it and the backend refuses it (``AnalysisException``,
nothing run) unless it is a plain query whose every table name is unqualified and either one of the
backend's views or a common table expression in scope. So a name never falls through to what the
sessions share: global temporary views (``global_temp.t``), the catalog's databases and persistent tables
(``default.t``, or ``t`` when the backend has no view ``t``), files (``parquet.`/data/x```), table-valued
functions (``read_files``, ``range``); and commands, ``EXECUTE IMMEDIATE`` and scripts never run. A Spark
Connect session parses statements on its server, where this check cannot look: its backend has its own
views all the same, but names it does not hold resolve in the server's catalog.

Timeouts
--------
A statement's Spark jobs carry a job tag of their own; ``statement_timeout`` seconds after it started, the
jobs with that tag are cancelled (again every 0.1 s, for jobs that start later) and
:class:`~kakeibo.errors.StatementTimeout` is raised. Planning before the first job is not
interrupted.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import ArgumentError
from ._base import DEFAULT_STATEMENT_TIMEOUT, cancel_at_deadline, check_timeout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparkBackend"]

_LOCAL_MASTER = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")

# log4j2 configuration for the driver JVM: Spark's own start-up chatter goes, messages at or above
# the chosen level stay (on stderr, as Spark prints them by default).
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = {level}
"""

_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

_LOG_LEVELS = ("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")


def local_threads(master: str) -> int | None:
    """Worker threads of a local master URL (``None`` when ``master`` is not local).

    >>> local_threads("local[2]"), local_threads("local"), local_threads("spark://h:7077")
    (2, 1, None)
    """
    match = _LOCAL_MASTER.match(master.strip())
    if match is None:
        return None
    threads = match.group(1)
    if threads is None:
        return 1
    if threads == "*":
        return os.cpu_count() or 1
    return int(threads)


def _takes_arrow() -> bool:
    """Whether ``createDataFrame`` takes a ``pyarrow.Table`` (PySpark 4.0 and later)."""
    import pyspark

    return int(pyspark.__version__.split(".")[0]) >= 4


@contextmanager
def _quiet_python_warnings() -> Iterator[None]:
    # PySpark 4 warns at import time that pandas >= 3 is not fully supported; this backend moves data
    # as Arrow and does not use pandas on PySpark 4.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
        yield


# Operators of a parsed query (class names in Spark's parser output) that read nothing by themselves. A
# statement whose parsed plan holds any other node is refused before it runs: a command (DDL, INSERT, SET,
# CACHE, ...), EXECUTE IMMEDIATE, a SQL script, a table-valued function (range, read_files), time travel.
_QUERY_OPERATORS = frozenset(
    {
        "Aggregate",
        "Distinct",
        "Except",
        "Filter",
        "Generate",
        "GlobalLimit",
        "Intersect",
        "Join",
        "LateralJoin",
        "LocalLimit",
        "LocalRelation",
        "Offset",
        "OneRowRelation",
        "Pivot",
        "Project",
        "Sort",
        "SubqueryAlias",
        "Union",
        "Unpivot",
        "UnresolvedHint",
        "UnresolvedInlineTable",
        "UnresolvedSubqueryColumnAliases",
        "WithWindowDefinition",
    }
)


def _scala_list(seq: Any) -> list[Any]:
    """The elements of a Scala ``Seq`` reached through Py4J."""
    return [seq.apply(i) for i in range(seq.size())]


def _refused(reason: str) -> Exception:
    from pyspark.errors import AnalysisException

    return AnalysisException(message=f"{reason} This backend runs only queries over its own tables.")


class _Contexts:
    """The SparkContext backends started in this process (a JVM holds one) and how many open backends use
    it. A backend that closes stops it only when it is the last of them; a context someone else started
    is never stopped."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # held while a backend starts or joins a context
        self._root: SparkSession | None = None  # the session the context was started with
        self._users = 0

    def started(self, root: SparkSession) -> None:
        """Record ``root``'s context as started by a backend (call under :attr:`lock`)."""
        self._root, self._users = root, 0

    def join(self, session: SparkSession) -> object | None:
        """Count a backend working in ``session`` as a user of the started context if it runs on it (call
        under :attr:`lock`); that context, to hand to :meth:`leave`, or ``None``."""
        context = getattr(session, "_sc", None)  # None for Spark Connect sessions
        if self._root is None or context is None or context is not self._root.sparkContext:
            return None
        self._users += 1
        return context

    def leave(self, context: object) -> None:
        """A backend counted on ``context`` closed: stop the context if no other backend uses it (a context
        stopped and started again in between is not the one it joined)."""
        with self.lock:
            if self._root is None or context is not self._root.sparkContext:
                return
            self._users -= 1
            if self._users == 0:
                root, self._root = self._root, None
                root.stop()


_CONTEXTS = _Contexts()


class SparkBackend:
    """Run kakeibo's statements with Spark SQL, each backend in a Spark session of its own.

    ``master`` is a Spark master URL (see the module docstring); ``session`` an existing ``SparkSession``
    whose context (or Spark Connect server) to use instead of building one (``master``, ``conf`` and
    ``log_level`` are then ignored). ``conf`` holds extra Spark properties for the session being built.
    ``log_level`` is the driver's log4j level (``"ERROR"`` by default: Spark's warnings about, e.g.,
    windows without a partition would otherwise fill test output). ``quick_jit`` (local mode) has the
    driver JVM compile with the C1 JIT only (``-XX:TieredStopAtLevel=1``): about 2 s less from start to
    the first results on small data, but slower on long heavy jobs, where ``quick_jit=False`` is better.
    JVM options in ``conf["spark.driver.extraJavaOptions"]`` are added after the backend's own (later ones
    win). ``statement_timeout`` (seconds; ``None``: no limit) is how long a statement may run before its
    Spark jobs are cancelled and :class:`~kakeibo.errors.StatementTimeout` is raised.

    The backend works in a new session of that context (:attr:`session`, ``SparkSession.newSession()``):
    tables loaded with :meth:`load_table` or :meth:`register_source` are temporary views of that session
    alone, invisible to other backends and to the session it was made from (whose own temporary views
    and run-time SQL settings it does not see either), and they go when the backend is closed. See the
    module docstring for the statements it runs.
    """

    dialect = "spark"

    def __init__(
        self,
        master: str = "local[2]",
        session: SparkSession | None = None,
        *,
        conf: Mapping[str, str] | None = None,
        app_name: str = "kakeibo",
        log_level: str = "ERROR",
        quick_jit: bool = True,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
    ) -> None:
        self.statement_timeout = check_timeout(statement_timeout)
        self._log_dir: str | None = None
        self._views: set[str] = set()
        self._closed = False
        if session is not None:
            with _CONTEXTS.lock:
                self._session = session.newSession()
                self._context = _CONTEXTS.join(self._session)
            return
        level = log_level.upper()
        if level not in _LOG_LEVELS:
            raise ArgumentError(f"log_level must be one of {', '.join(_LOG_LEVELS)}, not {log_level!r}")
        try:
            with _quiet_python_warnings():
                from pyspark import SparkContext
                from pyspark.sql import SparkSession
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("SparkBackend needs PySpark: pip install pyspark") from exc
        extra = dict(conf or {})
        settings = self._default_conf(master, level, quick_jit, extra.pop(_JAVA_OPTIONS, ""))
        settings.update(extra)
        try:
            with _CONTEXTS.lock, _quiet_python_warnings():
                if SparkContext._active_spark_context is None:
                    builder = SparkSession.builder.master(master).appName(app_name)
                    for key, value in settings.items():
                        builder = builder.config(key, value)
                    root = builder.getOrCreate()
                    _CONTEXTS.started(root)
                else:
                    # One context per JVM: a running one is joined as it is (its master and settings stay,
                    # and the session it hands back is left untouched).
                    root = SparkSession.builder.getOrCreate()
                self._session = root.newSession()
                self._context = _CONTEXTS.join(self._session)
        finally:
            # The JVM read its log4j2 file while starting; nothing reads it again.
            self._remove_log_dir()
        runtime = self._session.conf
        for key, value in settings.items():  # the SQL settings of this backend's own session
            if runtime.isModifiable(key):
                runtime.set(key, value)
        self._session.sparkContext.setLogLevel(level)

    def _default_conf(self, master: str, level: str, quick_jit: bool, java_options: str) -> dict[str, str]:
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            # Arrow for the pandas paths of PySpark 3 (PySpark 4 uses Arrow directly).
            "spark.sql.execution.arrow.pyspark.enabled": "true",
        }
        threads = local_threads(master)
        if threads is not None:
            self._log_dir = tempfile.mkdtemp(prefix="kakeibo-spark-")
            log_config = os.path.join(self._log_dir, "log4j2.properties")
            with open(log_config, "w", encoding="utf-8") as f:
                f.write(_LOG4J2.format(level=level))
            options = [f"-Dlog4j2.configurationFile=file:{log_config}"]
            if quick_jit:
                options.append("-XX:TieredStopAtLevel=1")
            java_options = " ".join([*options, java_options]).strip()
            settings.update(
                {
                    "spark.sql.shuffle.partitions": str(threads),
                    "spark.default.parallelism": str(threads),
                    "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1",
                }
            )
        if java_options:
            settings[_JAVA_OPTIONS] = java_options
        return settings

    @property
    def session(self) -> SparkSession:
        """This backend's own ``SparkSession`` (its temporary views are the backend's tables)."""
        return self._session

    def database_name(self) -> None:
        """No database: a three-part table name never names this backend's tables, so kakeibo refuses it.

        Spark's three-part names are ``catalog.namespace.table``, and a bare name resolves first to a
        temporary view of the session, then to a table of the current catalog and namespace
        (``current_catalog()``, ``current_database()``: ``spark_catalog.default`` unless changed). This
        backend's tables are temporary views, which Spark 4 files under ``system.session`` (``session.t``,
        ``system.session.t``), not under any catalog's database: ``spark_catalog.default.t`` names a
        persistent table, never the view ``t`` kakeibo reads. So neither the current catalog nor the current
        database would say where the tables are, and naming them would let a query that names another table
        be answered from the view. (The backend itself runs only unqualified names; ``main.t`` and
        ``public.t`` stay accepted, as for every engine, since kakeibo strips them.)"""
        return None

    def execute(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        """Run one Spark SQL query and return its rows as Arrow (Spark's types: ``SUM`` of integers is
        ``int64``, ``AVG`` is ``float64``, ``DECIMAL`` stays ``decimal128``).

        The statement is checked before it runs (see the module docstring): anything but a query over
        this backend's tables raises ``AnalysisException``. Its Spark jobs are cancelled after ``timeout``
        seconds (default :attr:`statement_timeout`), raising
        :class:`~kakeibo.errors.StatementTimeout`."""
        limit = check_timeout(timeout, self.statement_timeout)
        self._check_statement(sql)
        with self._deadline(limit):
            frame = self._session.sql(sql)
            if hasattr(frame, "toArrow"):  # PySpark >= 4.0
                table: pa.Table = frame.toArrow()
                return table
            return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)  # pragma: no cover

    def _check_statement(self, sql: str) -> None:
        """Refuse ``sql`` unless Spark's parser reads it as a query made of :data:`_QUERY_OPERATORS` whose
        every table name is, unqualified, a temporary view of this backend's session or a common table
        expression in scope; nothing is run. (A Spark Connect session parses on its server: unchecked.)"""
        jsession = getattr(self._session, "_jsparkSession", None)
        if jsession is None:
            return
        state = jsession.sessionState()
        catalog = state.catalog()
        case_sensitive = bool(state.conf().caseSensitiveAnalysis())

        def fold(name: str) -> str:
            return name if case_sensitive else name.lower()

        pending: list[tuple[Any, frozenset[str]]] = [(state.sqlParser().parsePlan(sql), frozenset())]
        while pending:
            node, ctes = pending.pop()
            kind = node.getClass().getSimpleName()
            if kind == "UnresolvedWith":
                # each definition sees those before it (a recursive one is not in its own scope), the body all
                scope = ctes
                for definition in _scala_list(node.cteRelations()):
                    pending.append((definition._2(), scope))
                    scope = scope | {fold(definition._1())}
                pending.append((node.child(), scope))
                continue  # its inner children are the definitions, queued above
            if kind == "UnresolvedRelation":
                parts = _scala_list(node.multipartIdentifier())
                if len(parts) != 1 or node.isStreaming():
                    raise _refused("Tables are named without a database, schema or file path.")
                if fold(parts[0]) not in ctes and not catalog.getTempView(parts[0]).isDefined():
                    raise _refused(f"Table {parts[0]!r} is not loaded in this backend.")
            elif kind not in _QUERY_OPERATORS:
                raise _refused("The statement is not a plain query.")
            # inner children: the plans of subqueries in the node's expressions
            pending.extend((child, ctes) for child in _scala_list(node.children()))
            pending.extend((child, ctes) for child in _scala_list(node.innerChildren()))

    @contextmanager
    def _deadline(self, timeout: float | None) -> Iterator[None]:
        """Run the block's Spark jobs under a job tag of their own, cancelled once ``timeout`` has passed."""
        if timeout is None:
            yield
            return
        tag = f"kakeibo-{uuid.uuid4().hex}"
        add: Callable[[str], object]
        remove: Callable[[str], object]
        cancel: Callable[[str], object]
        context = getattr(self._session, "_sc", None)
        if context is not None:
            # SparkContext tags are thread properties inherited by the thread that collects the Arrow result
            # (the session's operation tags are not).
            add, remove, cancel = context.addJobTag, context.removeJobTag, context.cancelJobsWithTag
        else:  # pragma: no cover - Spark Connect: the session's operation tags
            add, remove, cancel = self._session.addTag, self._session.removeTag, self._session.interruptTag
        add(tag)
        try:
            with cancel_at_deadline(timeout, lambda: cancel(tag)):
                yield
        finally:
            remove(tag)

    def load_table(self, name: str, data: pa.Table) -> None:
        """Create or replace temporary view ``name`` of this backend's session, holding ``data``."""
        if _takes_arrow():
            frame = self._session.createDataFrame(data)
        else:  # pragma: no cover - PySpark 3 takes pandas, not Arrow
            frame = self._session.createDataFrame(data.to_pandas())
        frame.createOrReplaceTempView(name)
        self._views.add(name)

    def register_source(self, name: str, path: str | os.PathLike[str]) -> None:
        """Expose a Parquet or CSV file (with a header row) as temporary view ``name`` of this backend's
        session."""
        text = os.fspath(path)
        reader = self._session.read
        if text.lower().endswith(".parquet"):
            frame = reader.parquet(text)
        else:
            frame = reader.option("header", True).option("inferSchema", True).csv(text)
        frame.createOrReplaceTempView(name)
        self._views.add(name)

    def close(self) -> None:
        """Drop this backend's views; stop the SparkContext if a backend started it and no other open
        backend uses it. Closing twice does nothing more."""
        if self._closed:
            return
        self._closed = True
        try:
            context = getattr(self._session, "_sc", None)
            if context is None or context._jsc is not None:  # the views of a stopped context went with it
                for name in self._views:
                    self._session.catalog.dropTempView(name)
            self._views.clear()
        finally:
            if self._context is not None:
                context, self._context = self._context, None
                _CONTEXTS.leave(context)
            self._remove_log_dir()

    def _remove_log_dir(self) -> None:
        if self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None
