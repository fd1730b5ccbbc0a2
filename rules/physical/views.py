"""How each table read of the query is bound: behind a barrier when it is several reads, and
projected to the table's names unless it has them (physical rules)."""

from __future__ import annotations

from mor.planner.nodes import IcebergScan, MetadataTable, Plan
from mor.planner.settings import current
from mor.rules.physical.reading import SessionFacts, reading


def needs_barrier(scan: Plan, facts: SessionFacts = SessionFacts()) -> bool:
    """Whether this scan compiles into more than one Parquet read of data files (one per
    layout through file lists, else groups of at most the listing threshold's paths; one set
    per branch), with the setting on.

    Spark pushes a semi or anti join (`IN`/`EXISTS` subqueries, INTERSECT, EXCEPT) through a
    Union into every child, and down through the scan's own joins to each read: a sort-merge
    join (with a shuffle of its own) per group of 32 files. TPC-H q18 at scale factor 1 over
    240-file tables ran ~600 stages for it (39.5 s; 16.8 s with the barrier, 16.0 s for
    Iceberg's reader). A data source scan is a leaf Spark cannot push joins into; the barrier
    makes mor's scan one too."""
    if not current().scan_barrier:
        return False
    reads = 0
    for node in scan.walk():
        if isinstance(node, IcebergScan) and node.data_files():
            reads += reading(node.data_files(), facts).reads
    return reads > 1


def named_as_table(scan: Plan) -> bool:
    """A scan whose DataFrame already has the table's column names (an IcebergScan selects
    its output by name; a metadata table's rows are its columns): no projection to the user's
    names is needed above it."""
    if isinstance(scan, MetadataTable):
        return True
    return isinstance(scan, IcebergScan) and all(c.name == c.label for c in scan.output)
