"""The planner: everything mor knows before Spark runs, no pyspark. Two halves:

Reading Iceberg metadata (what a table holds, at a snapshot):
  sources.py        tables from a catalog or a metadata file; their FileIO
  manifests.py      manifest lists and manifests decoded (fastavro; pyiceberg as fallback)
  scan_planning.py  a scan's data files and the delete files that apply to each (SEMANTICS.md)
  delete_index.py   the spec's scope rules for deletes, as an index
  eq_bounds.py      whether an equality delete can reach a data file, from column metrics
  column_metrics.py file pruning by column metrics
  layouts.py        how a file's columns map to the table's field ids (footers, when needed)
  schemas.py, defaults.py  schema history lookups; v3 column defaults
  changes.py, consume.py   row-level changes between snapshots; a consumer's next commits
  requests.py       the requests made to object stores, counted

Planning queries (what a SELECT needs of each table):
  sql.py            SQL text bound to logical scans (sqlglot); the query around them stays text
  nodes.py          the logical plan's nodes
  pushdown.py       the columns and filters each table reference needs
  attach.py         the step that attaches each scan's files (calls the first half)
  explain.py, query_metrics.py  EXPLAIN text; merge-on-read metrics known before reading

What mor writes (delete files, manifests, snapshots) is not here but in writer/, a layer
beside this one that reads manifests through manifests.py and nothing on the read path imports.

Shared: settings.py (the settings machinery, and the settings planner/ reads; the layers above
declare theirs), state.py (the caches of the process, one object passed down as `cache`),
cache.py (the bounded cache each of them is), errors.py (one-line errors).
The rules that rewrite logical plans are in rules/, the physical rules that make the physical
plan in rules/physical/; its translation into Spark is physical/.
"""
