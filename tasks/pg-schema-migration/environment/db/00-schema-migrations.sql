-- Bookkeeping of /app/migrate.py; migration 001 is applied by the next init script.
CREATE TABLE schema_migrations (
    version text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO schema_migrations (version) VALUES ('001_create_customers');
