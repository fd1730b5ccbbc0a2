-- The first snapshot, before any delete, by its tag (time travel reads that snapshot's schema).
SELECT count(*) AS orders_at_first_snapshot FROM demo.orders VERSION AS OF 'first_load';
