-- Split customers.name into first_name / last_name (backfilled, NOT NULL) and drop it.
ALTER TABLE customers ADD COLUMN first_name text, ADD COLUMN last_name text;

WITH parts AS (
    SELECT id,
           regexp_split_to_array(
               btrim(regexp_replace(coalesce(name, ''), '\s+', ' ', 'g')), ' '
           ) AS words
    FROM customers
)
UPDATE customers AS c
SET first_name = CASE
        WHEN cardinality(p.words) <= 1 THEN coalesce(p.words[1], '')
        ELSE array_to_string(p.words[1:cardinality(p.words) - 1], ' ')
    END,
    last_name = CASE
        WHEN cardinality(p.words) <= 1 THEN ''
        ELSE p.words[cardinality(p.words)]
    END
FROM parts AS p
WHERE p.id = c.id;

ALTER TABLE customers
    ALTER COLUMN first_name SET NOT NULL,
    ALTER COLUMN last_name SET DEFAULT '',
    ALTER COLUMN last_name SET NOT NULL;

DROP VIEW customer_directory;
ALTER TABLE customers DROP COLUMN name;
CREATE VIEW customer_directory AS
    SELECT id, btrim(first_name || ' ' || last_name) AS display_name, email FROM customers;
