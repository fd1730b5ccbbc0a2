-- Revenue per region. The equality columns are read only to resolve the deletes, once: the query
-- above did that, so this one reads region and amount over the positions it kept.
SELECT region, count(*) AS orders, sum(amount) AS revenue
FROM demo.orders
GROUP BY region
ORDER BY region;
