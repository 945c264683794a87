#!/usr/bin/env bash
# Compares bucket_totals with the counts taken from items now (one scan); reward 1.0 when they
# agree.
set -u
mkdir -p /logs/verifier
wrong=$(psql -tAX -v ON_ERROR_STOP=1 <<'SQL'
WITH truth AS MATERIALIZED (SELECT bucket, count(*)::bigint AS items FROM items GROUP BY bucket)
SELECT count(*) FROM (
    (SELECT bucket, items FROM truth EXCEPT SELECT bucket, items FROM bucket_totals)
    UNION ALL
    (SELECT bucket, items FROM bucket_totals EXCEPT SELECT bucket, items FROM truth)
) AS differences;
SQL
)
if [ "$?" -eq 0 ] && [ "$wrong" = 0 ]; then reward=1.0; else reward=0.0; fi
printf '{"reward": %s}\n' "$reward" >/logs/verifier/reward.json
echo "differences: ${wrong:-error}; reward: $reward"
