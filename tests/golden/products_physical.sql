-- physical: the DataFrame operations
SELECT color, count(*) AS n FROM iceberg_scan('dremio/products_with_eq_deletes') GROUP BY color
