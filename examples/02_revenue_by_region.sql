-- Revenue per region; the equality columns are read even though the query does not select them.
SELECT region, count(*) AS orders, sum(amount) AS revenue
FROM demo.orders
GROUP BY region
ORDER BY region;
