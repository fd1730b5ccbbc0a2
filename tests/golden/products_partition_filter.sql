-- the filter prunes the other partitions' data files and their delete files
SELECT product_id, name FROM iceberg_scan('dremio/products_with_eq_deletes') WHERE category = 'gizmo' AND quantity > 1
