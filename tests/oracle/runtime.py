"""The real Apache Iceberg 1.10.2 Spark runtime, set up with pip alone.

The runtime jar comes from the PyPI package `snowpark-connect-deps-iceberg` (a dev extra). As
shipped it references relocated Jackson classes (org.apache.iceberg.shaded.com.fasterxml.jackson)
that it does not contain; `relocated_jackson_jar` rebuilds them from the Jackson jars pyspark
ships, by rewriting class-file constant pools (what a shading plugin does), standard library only.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zipfile
from pathlib import Path
from typing import Any

RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
SHADED = b"org/apache/iceberg/shaded/"
_PREFIXES = (
    (b"com/fasterxml/jackson/", SHADED + b"com/fasterxml/jackson/"),
    (b"com.fasterxml.jackson.", b"org.apache.iceberg.shaded.com.fasterxml.jackson."),
)
# payload sizes of constant-pool entries other than Utf8 (tag 1, length-prefixed)
_CP_SIZES = {
    3: 4,
    4: 4,
    5: 8,
    6: 8,
    7: 2,
    8: 2,
    9: 4,
    10: 4,
    11: 4,
    12: 4,
    15: 3,
    16: 2,
    17: 4,
    18: 4,
    19: 2,
    20: 2,
}
_JACKSON = (
    "jackson-core-",
    "jackson-databind-",
    "jackson-annotations-",
    "jackson-datatype-jsr310-",
)


class RuntimeUnavailable(Exception):
    """The Iceberg runtime cannot be installed here: the reason is the message."""


def _relocate(value: bytes) -> bytes:
    for old, new in _PREFIXES:
        value = value.replace(old, new)
    return value


def relocate_class(data: bytes) -> bytes:
    """Rewrite every Utf8 constant of a class file; nothing else in it names a class."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    (count,) = struct.unpack_from(">H", data, 8)
    out = bytearray(data[:10])
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            (n,) = struct.unpack_from(">H", data, pos + 1)
            text = _relocate(data[pos + 3 : pos + 3 + n])
            out += bytes([1]) + struct.pack(">H", len(text)) + text
            pos += 3 + n
        else:
            size = _CP_SIZES[tag]
            out += data[pos : pos + 1 + size]
            pos += 1 + size
            index += 1 if tag in (5, 6) else 0  # long and double take two slots
        index += 1
    return bytes(out + data[pos:])


def relocated_jackson_jar(cache: Path) -> Path:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    sources = sorted(p for p in jars.glob("jackson-*.jar") if p.name.startswith(_JACKSON))
    if not sources:
        raise RuntimeUnavailable(f"pyspark ships no Jackson jars in {jars}")
    key = hashlib.sha256("|".join(p.name for p in sources).encode()).hexdigest()[:12]
    target = cache / f"iceberg-shaded-jackson-{key}.jar"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    seen: set[str] = set()
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for src in sources:
            with zipfile.ZipFile(src) as jar:
                for name in jar.namelist():
                    if (
                        name.endswith("/")
                        or name.startswith("META-INF/versions/")
                        or (name.endswith("module-info.class"))
                    ):
                        continue
                    data = jar.read(name)
                    if name.endswith(".class"):
                        name, data = _relocate(name.encode()).decode(), relocate_class(data)
                    elif name.startswith("META-INF/services/"):
                        name, data = _relocate(name.encode()).decode(), _relocate(data)
                    elif name.startswith("META-INF/"):
                        continue
                    else:
                        name = _relocate(name.encode()).decode()
                    if name not in seen:
                        seen.add(name)
                        out.writestr(name, data)
    os.replace(tmp, target)
    return target


def runtime_jars(cache: Path) -> list[Path]:
    try:
        import snowpark_connect_deps_iceberg as deps
    except ImportError as e:
        raise RuntimeUnavailable(
            "the package snowpark-connect-deps-iceberg (dev extra) is not installed"
        ) from e
    jar = Path(deps.get_jar_path(RUNTIME_JAR))
    if not jar.exists():
        raise RuntimeUnavailable(f"{jar} is missing from snowpark-connect-deps-iceberg")
    return [jar, relocated_jackson_jar(cache)]


def iceberg_session(
    warehouse: Path | str,
    cache: Path,
    small_data: bool = False,
    conf: dict[str, str] | None = None,
) -> Any:
    """A local Spark 3.5 session with Iceberg's runtime and a Hadoop catalog named `local`.

    `small_data` (the differential tests) turns off whole-stage code generation and adaptive
    execution: on tiny tables compiling and re-planning cost more than they save. Never for
    benchmarks: Spark's vectorized Parquet reader needs whole-stage code generation.
    `conf`: more settings (`spark.jars` entries are added to the runtime's), e.g. s3a's.
    """
    from pyspark.sql import SparkSession

    jars = [str(j) for j in runtime_jars(cache)]
    extra = dict(conf or {})
    jars += [j for j in extra.pop("spark.jars", "").split(",") if j]
    log_conf = Path(__file__).resolve().parents[2] / "physical" / "log4j2.properties"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("mor-oracle")
        .config("spark.jars", ",".join(jars))
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.catalog.local", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.local.type", "hadoop")
        .config("spark.sql.catalog.local.warehouse", str(warehouse))
        .config("spark.sql.catalog.local.cache-enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2" if small_data else "8")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log_conf}")
    )
    for k, v in extra.items():
        builder = builder.config(k, v)
    if small_data:
        builder = builder.config("spark.sql.codegen.wholeStage", "false").config(
            "spark.sql.adaptive.enabled", "false"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("FATAL")
    return spark
