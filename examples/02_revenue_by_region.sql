-- Revenue per region. The query above anti-joined the equality deletes (a first read); this
-- second read of the same files resolves them to positions once (setting resolve_at_read), and
-- later queries read region and amount over the positions kept.
SELECT region, count(*) AS orders, sum(amount) AS revenue
FROM demo.orders
GROUP BY region
ORDER BY region;
