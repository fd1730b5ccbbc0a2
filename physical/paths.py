"""The path string Spark reports in `_metadata.file_path` for a file it is asked to read."""

from __future__ import annotations

from pyspark.sql import SparkSession


class SparkPaths:
    """Computes Spark's own form of a path through Hadoop's Path, once per path."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark._jvm  # type: ignore[attr-defined]
        self._conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        self._cache: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        hit = self._cache.get(path)
        if hit is None:
            hp = self._jvm.org.apache.hadoop.fs.Path(path)
            fs = hp.getFileSystem(self._conf)
            uri = hp.makeQualified(fs.getUri(), fs.getWorkingDirectory()).toUri()
            # Spark's file index lists local files as file:/path (no authority)
            hit = "file:" + uri.getRawPath() if uri.getScheme() == "file" else uri.toString()
            self._cache[path] = hit
        return hit
