"""Reading a table's files with Spark's Parquet reader: the reads by file list or path
(reads.py, file_lists.py, paths.py, classic.py), the columns as stored and as declared
(columns.py, types.py, metadata_columns.py), the small per-file tables joined to the rows
(tables.py), the guards that stop a wrong read (guards.py) and the files read on the driver
(files.py). Imports physical/spark/ only; physical/merge_on_read.py puts a scan together."""
