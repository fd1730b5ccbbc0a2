"""The writer: what mor commits to a table, and its one path to the catalog.

Beside the read path, not on it: it depends on planner/ (the manifest reader, the table's
metadata types), and nothing in planner/, rules/ or physical/ imports it; mor/ calls it.

- `files`: the files written into a table (delete files, deletion vector records, data file
  records with their footer statistics), listing and deleting what an operation wrote;
- `manifests`: manifests and manifest lists, v2 through pyiceberg's writers, v3 as Avro
  records copied from planner's reader;
- `conflicts`: whether a commit that landed first touches what a change changes;
- `producer`: the one snapshot producer every commit goes through (`replace` for compaction
  and conversion, `append`/`overwrite` row deltas for the test tables' writer), with
  Iceberg's optimistic concurrency;
- `policy`: what compaction rewrites, a pure function (`choose_rewrites`);
- `tables`: the test tables' and the demo's writer (`TableWriter`), committing through the
  producer.
"""
