#!/usr/bin/env bash
# Reference solution: one INSERT ... SELECT with a GROUP BY.
set -euo pipefail
psql -v ON_ERROR_STOP=1 <<'SQL'
CREATE TABLE bucket_totals (bucket int PRIMARY KEY, items bigint NOT NULL);
INSERT INTO bucket_totals SELECT bucket, count(*) FROM items GROUP BY bucket;
SQL
