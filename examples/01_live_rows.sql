-- Every live order: position and equality deletes already applied.
SELECT order_id, region, customer, amount FROM demo.orders ORDER BY order_id;
