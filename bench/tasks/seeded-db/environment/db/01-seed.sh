# Sourced by the image's entry point on the first start, while the server listens on a private
# socket only: SEED_ROWS rows in 1000 buckets.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    --set rows="${SEED_ROWS:-4000000}" <<'SQL'
CREATE TABLE items (id bigint NOT NULL, bucket int NOT NULL, payload text NOT NULL);
INSERT INTO items SELECT g, (g::bigint * 7919) % 1000, 'item ' || g
    FROM generate_series(1, :rows) g;
SQL
