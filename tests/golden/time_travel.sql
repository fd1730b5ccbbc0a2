-- an older snapshot: only the deletes committed by then
SELECT * FROM iceberg_scan('duckdb_iceberg/equality_deletes/warehouse/mydb/mytable_partitioned') VERSION AS OF 6022113614852838397
