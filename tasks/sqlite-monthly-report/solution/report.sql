WITH paid AS (
    SELECT o.id, strftime('%Y-%m', o.ordered_at) AS month, c.country
    FROM orders AS o
    JOIN customers AS c ON c.id = o.customer_id
    WHERE lower(o.status) = 'paid'
),
totals AS (
    SELECT p.month, p.country, COUNT(DISTINCT p.id) AS orders,
           COALESCE(SUM(i.quantity * i.unit_price_cents), 0) AS revenue_cents
    FROM paid AS p
    LEFT JOIN order_items AS i ON i.order_id = p.id
    GROUP BY p.month, p.country
),
ranked AS (
    SELECT p.month, p.country, i.sku,
           ROW_NUMBER() OVER (
               PARTITION BY p.month, p.country ORDER BY SUM(i.quantity) DESC, i.sku ASC
           ) AS position
    FROM paid AS p
    JOIN order_items AS i ON i.order_id = p.id
    GROUP BY p.month, p.country, i.sku
)
SELECT t.month, t.country, t.orders, t.revenue_cents, r.sku AS top_sku
FROM totals AS t
LEFT JOIN ranked AS r ON r.month = t.month AND r.country = t.country AND r.position = 1
ORDER BY t.month ASC, t.revenue_cents DESC, t.country ASC;
