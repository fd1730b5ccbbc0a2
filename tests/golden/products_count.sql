-- equality deletes of two id sets, one file reached by both, a position delete
SELECT count(*) FROM iceberg_scan('dremio/products_with_eq_deletes')
