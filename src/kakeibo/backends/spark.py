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
``session``; :meth:`SparkBackend.close` then leaves it running.

Needs ``pyspark`` (4.x: Arrow in and out without pandas; 3.x goes through pandas) and a Java runtime
(Java 17 or 21 for Spark 4) on ``PATH`` or in ``JAVA_HOME``.

Startup
-------
Creating the session costs seconds (a JVM starts). In local mode the backend trims what it can: no web
UI, no console progress bar, the driver bound to loopback, shuffles into as many partitions as there
are local threads (Spark's default of 200 is for clusters and makes every ``GROUP BY`` run 200 tasks),
JVM/Spark start-up messages below ``log_level`` silenced, and the JIT limited to its quick first tier
(``quick_jit``). ``conf`` entries override all of these.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa

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


class SparkBackend:
    """Run kakeibo's statements with Spark SQL.

    ``master`` is a Spark master URL (see the module docstring); ``session`` an existing
    ``SparkSession`` to use instead of building one (``master``, ``conf`` and ``log_level`` are then
    ignored). ``conf`` holds extra Spark properties for the session being built. ``log_level`` is the
    driver's log4j level (``"ERROR"`` by default: Spark's warnings about, e.g., windows without a
    partition would otherwise fill test output). ``quick_jit`` (local mode) has the driver JVM compile
    with the C1 JIT only (``-XX:TieredStopAtLevel=1``): about 2 s less from start to the first results
    on small data, but slower on long heavy jobs, where ``quick_jit=False`` is better. JVM options in
    ``conf["spark.driver.extraJavaOptions"]`` are added after the backend's own (later ones win).

    Tables loaded with :meth:`load_table` are temporary views of the session: they live in the
    driver's session, disappear with it, and are not visible to other sessions.
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
    ) -> None:
        self._log_dir: str | None = None
        if session is not None:
            self._session = session
            self._owns_session = False
            return
        level = log_level.upper()
        if level not in _LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(_LOG_LEVELS)}, not {log_level!r}")
        try:
            with _quiet_python_warnings():
                from pyspark.sql import SparkSession
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("SparkBackend needs PySpark: pip install pyspark") from exc
        extra = dict(conf or {})
        settings = self._default_conf(master, level, quick_jit, extra.pop(_JAVA_OPTIONS, ""))
        settings.update(extra)
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        # getOrCreate hands back a session already running in this process rather than starting one:
        # that one belongs to whoever started it and close() leaves it alone.
        running = SparkSession.getActiveSession()
        try:
            with _quiet_python_warnings():
                self._session = builder.getOrCreate()
        finally:
            # The JVM read its log4j2 file while starting; nothing reads it again.
            self._remove_log_dir()
        self._owns_session = running is None
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
        """The underlying ``SparkSession``."""
        return self._session

    def execute(self, sql: str) -> pa.Table:
        """Run one Spark SQL statement and return its rows as Arrow (Spark's types: ``SUM`` of integers
        is ``int64``, ``AVG`` is ``float64``, ``DECIMAL`` stays ``decimal128``)."""
        frame = self._session.sql(sql)
        if hasattr(frame, "toArrow"):  # PySpark >= 4.0
            table: pa.Table = frame.toArrow()
            return table
        return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)  # pragma: no cover

    def load_table(self, name: str, data: pa.Table) -> None:
        """Create or replace temporary view ``name`` holding ``data``."""
        if _takes_arrow():
            frame = self._session.createDataFrame(data)
        else:  # pragma: no cover - PySpark 3 takes pandas, not Arrow
            frame = self._session.createDataFrame(data.to_pandas())
        frame.createOrReplaceTempView(name)

    def register_source(self, name: str, path: str | os.PathLike[str]) -> None:
        """Expose a Parquet or CSV file (with a header row) as temporary view ``name``."""
        text = os.fspath(path)
        reader = self._session.read
        if text.lower().endswith(".parquet"):
            frame = reader.parquet(text)
        else:
            frame = reader.option("header", True).option("inferSchema", True).csv(text)
        frame.createOrReplaceTempView(name)

    def close(self) -> None:
        """Stop the session if this backend started it."""
        if self._owns_session:
            self._session.stop()
            self._owns_session = False
        self._remove_log_dir()

    def _remove_log_dir(self) -> None:
        if self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None
