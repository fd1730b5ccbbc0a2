-- position deletes only (no split) on both sides of a self-join
SELECT a.order_year, count(*) AS n FROM iceberg_scan('dremio/multi_rowgroup_orders_with_deletes') a JOIN iceberg_scan('dremio/orders') b ON a.order_id = b.order_id WHERE b.order_year = 2020 GROUP BY a.order_year ORDER BY n DESC LIMIT 5
