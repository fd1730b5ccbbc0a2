"""Lists through py4j in a fixed number of round trips (classic sessions only).

pyspark hands a Python list to the JVM one element per round trip (py4j's list converter: a
`new ArrayList` and then an `add` per item), and reads a Java array back the same way (a `get`
per item). Reading by path (the fallback of physical/scan/reads.py, when file lists cannot serve),
mor gives Spark up to 32 paths per read and asks for the paths Spark reads: with many files
that was a third of the round trips of `mor_sql()` (measured: TPC-H Q6 over 240 streamed
files, ~1,000 of ~2,150). Here a list travels as one string, split or joined on the JVM with
NUL as the separator (no path holds it; fewer than 4 paths, or one holding NUL, go the usual
way).

On Spark Connect these are pyspark's own calls: the client builds the plan without round trips.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, DataFrameReader

from mor.physical.spark.session import is_connect

SEP = "\u0000"
_LITERAL = 0x10  # java.util.regex.Pattern.LITERAL


class _Handles:
    """What the helpers call on one JVM, looked up once (each lookup is a round trip)."""

    def __init__(self, jvm: Any) -> None:
        scala = str(jvm.scala.util.Properties.versionNumberString())
        self.wrap = (
            jvm.scala.collection.mutable.WrappedArray.make
            if scala.startswith("2.12")
            else jvm.scala.collection.immutable.ArraySeq.unsafeWrapArray
        )
        self.splitter = jvm.java.util.regex.Pattern.compile(SEP, _LITERAL)
        hadoop = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
        parts = tuple(int(x) for x in re.findall(r"\d+", hadoop)[:3])
        # HADOOP-18233: before 3.3.5, a session token's credentials are fetched lazily and
        # without a lock, so two tasks first using a new file system can fail "has no
        # credentials"
        self.racy_credentials = parts < (3, 3, 5)
        self.warmed: set[str] = set()


_HANDLES: weakref.WeakKeyDictionary[Any, _Handles] = weakref.WeakKeyDictionary()


def _handles(spark: Any) -> _Handles:
    """Per JVM view (a new SparkContext has a new one; handles die with theirs)."""
    jvm = spark.sparkContext._jvm
    h = _HANDLES.get(jvm)
    if h is None:
        h = _HANDLES[jvm] = _Handles(jvm)
    return h


def warm_credentials(spark: Any, scheme: str, options: dict[str, str], path: str) -> None:
    """Make the file system of a table's store scheme (physical/spark/store_access.py) and
    fetch its credentials once, on the driver, before tasks use it: on Hadoop before 3.3.5
    (pyspark 3.5) concurrent first uses race (HADOOP-18233). In local mode the driver's JVM is
    the executors'; a cluster's executors can still race, and Spark retries the task. One
    existence check of `path` per scheme and JVM, on a classic session only."""
    if is_connect(spark) or not any(k.endswith(".session.token") for k in options):
        return  # keys without a token are read at once, in the provider's constructor
    h = _handles(spark)
    if not h.racy_credentials or scheme in h.warmed:
        return
    if len(h.warmed) > 4096:
        h.warmed.clear()
    h.warmed.add(scheme)
    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    for k, v in options.items():
        conf.set(k, v)
    try:
        target = jvm.org.apache.hadoop.fs.Path(path)
        target.getFileSystem(conf).exists(target)
    except Exception:  # noqa: BLE001, S110 - a refusal surfaces, named, at the read itself
        pass


def read_parquet(reader: DataFrameReader, spark: Any, paths: Sequence[str]) -> DataFrame:
    """`reader.parquet(*paths)` (a reader of `spark`), on a classic session with the paths sent
    at once."""
    if is_connect(spark) or len(paths) < 4 or any(SEP in p for p in paths):
        return reader.parquet(*paths)
    h = _handles(spark)
    seq = h.wrap(h.splitter.split(SEP.join(paths), -1))
    return reader._df(reader._jreader.parquet(seq))  # type: ignore[attr-defined]


def input_files(df: DataFrame) -> list[str]:
    """`df.inputFiles()`, on a classic session fetched as one string."""
    if is_connect(df):
        return df.inputFiles()
    files = df._jdf.inputFiles()  # type: ignore[attr-defined]
    joined = str(_handles(df.sparkSession).wrap(files).mkString(SEP))
    return joined.split(SEP) if joined else []
