CREATE TABLE customers (
    id serial PRIMARY KEY,
    name text,
    email text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE VIEW customer_directory AS
    SELECT id, coalesce(btrim(name), '') AS display_name, email FROM customers;

INSERT INTO customers (name, email) VALUES
    ('Ada Lovelace', 'ada@example.com'),
    ('Grace Brewster Murray Hopper', 'grace@example.com'),
    ('  Alan   Turing ', 'alan@example.com'),
    ('Cher', 'cher@example.com'),
    (NULL, 'anonymous@example.com'),
    ('   ', 'blank@example.com'),
    ('Jean-Luc Picard', 'picard@example.com'),
    (E'Mary Ann\tEvans', 'eliot@example.com');
