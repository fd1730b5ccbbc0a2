-- The first snapshot, before any delete (time travel reads that snapshot's schema).
SELECT count(*) AS orders_at_first_snapshot FROM demo.orders VERSION AS OF __FIRST_SNAPSHOT__;
