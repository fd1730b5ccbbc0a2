-- unpartitioned table: every equality delete is global; verbose shows the rule trace
SELECT name FROM iceberg_scan('duckdb_iceberg/equality_deletes/warehouse/mydb/mytable')
