#!/usr/bin/env bash
# Entry point of envfarm's postgres image. It follows the official image's conventions so that
# public compose files work unchanged:
#   POSTGRES_USER (default postgres), POSTGRES_PASSWORD (required unless
#   POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_DB (default: the user's name), PGDATA,
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default scram-sha-256), and *_FILE
#   variants reading a value from a file;
#   on first start, /docker-entrypoint-initdb.d/*.sql, *.sql.gz and *.sh run in name order;
#   `command: -c key=value` (arguments starting with "-") become server options.
# While the init scripts run, the server listens on a private socket only, so a healthcheck
# such as `pg_isready -U postgres` passes once the real server is up, not before.
# The first start does not wait for the disk: initdb runs with --no-sync and the init scripts'
# server with fsync off (the official image syncs both). Nothing of a sandbox's database
# outlives a crash of its host, and every page is still written, to the kernel's cache the real
# server reads; this about halves the time to healthy (2.0 -> 1.1 s on a 2-core VM). The real
# server keeps fsync as configured.
# Nor does it usually run initdb: the image holds a cluster initialized at build time with the
# default superuser `postgres`, which the first start copies into the empty PGDATA, renames its
# superuser to POSTGRES_USER and sets its password. That is what initdb would have made, but for
# the cluster's system identifier, which every copy shares. initdb still runs when
# POSTGRES_INITDB_ARGS or POSTGRES_INITDB_WALDIR is set, or when the locale or time zone differs
# from the build's. From `docker run` to `pg_isready` with two init scripts: 2.6-3.0 -> 1.0-1.2 s.
set -Eeuo pipefail

TEMPLATE=/var/lib/postgresql/envfarm-template

log() { printf 'postgres-entrypoint: %s\n' "$*" >&2; }

from_file() {
    local name=$1 file_name="${1}_FILE"
    if [ -n "${!name:-}" ] && [ -n "${!file_name:-}" ]; then
        log "both $name and $file_name are set; set only one"
        exit 1
    fi
    if [ -n "${!file_name:-}" ]; then
        export "$name"="$(<"${!file_name}")"
    fi
    unset "$file_name"
}

if [ "${1:0:1}" = '-' ]; then
    set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
    exec "$@"
fi

export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
for name in POSTGRES_USER POSTGRES_PASSWORD POSTGRES_DB POSTGRES_INITDB_ARGS; do
    from_file "$name"
done
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"
    if [ "$(stat -c %U "$PGDATA")" != postgres ]; then
        chown -R postgres:postgres "$PGDATA"
    fi
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

# Not root (a pod's runAsUser): PGDATA may be a directory to make inside a mounted volume.
mkdir -p "$PGDATA" 2>/dev/null || true
if [ -O "$PGDATA" ]; then chmod 700 "$PGDATA"; fi
if [ ! -w "$PGDATA" ]; then
    log "$PGDATA is not writable by user $(id -un); run as root or give it to that user"
    exit 1
fi

run_sql() {
    psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" "$@"
}

run_initdb() {
    local args=(--username="$POSTGRES_USER" --auth-local=trust --auth-host=trust -D "$PGDATA")
    local pwfile=""
    if [ -n "${POSTGRES_PASSWORD:-}" ]; then
        pwfile="$(mktemp)"
        printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
        args+=(--pwfile="$pwfile")
    fi
    # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of words, as in the official image
    initdb --no-sync "${args[@]}" ${POSTGRES_INITDB_ARGS:-}
    if [ -n "$pwfile" ]; then rm -f "$pwfile"; fi
}

locale_env() {
    { env | grep -E '^(LANG|LANGUAGE|LC_[A-Z]+|TZ)=' || true; } | sort
}

# The build's cluster serves when initdb would make the same one: no initdb options, the same
# locale and time zone, an empty PGDATA (initdb refuses a non-empty one) and a template readable.
template_fits() {
    [ -z "${POSTGRES_INITDB_ARGS:-}" ] && [ -z "${POSTGRES_INITDB_WALDIR:-}" ] \
        && [ -r "$TEMPLATE/PG_VERSION" ] && [ -r "$TEMPLATE.env" ] \
        && [ -z "$(ls -A "$PGDATA")" ] && [ "$(locale_env)" = "$(<"$TEMPLATE.env")" ]
}

# The copied cluster's superuser is `postgres`; a session cannot rename its own user, so a
# throwaway superuser does it, and is dropped by the renamed one.
adopt_template() {
    local psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --quiet --dbname postgres)
    if [ "$POSTGRES_USER" != postgres ]; then
        "${psql[@]}" --username postgres <<<'CREATE ROLE envfarm_init SUPERUSER LOGIN;'
        "${psql[@]}" --username envfarm_init --set user="$POSTGRES_USER" \
            <<<'ALTER ROLE postgres RENAME TO :"user";'
        "${psql[@]}" --username "$POSTGRES_USER" <<<'DROP ROLE envfarm_init;'
    fi
    if [ -n "${POSTGRES_PASSWORD:-}" ]; then
        # from the environment, not the command line, which every process can read
        ENVFARM_PASSWORD="$POSTGRES_PASSWORD" "${psql[@]}" --username "$POSTGRES_USER" \
            --set user="$POSTGRES_USER" <<'SQL'
\getenv password ENVFARM_PASSWORD
ALTER ROLE :"user" PASSWORD :'password';
SQL
    fi
}

initialize() {
    local auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
        cat >&2 <<'MSG'
postgres-entrypoint: the database is not initialized and no superuser password is set.
  Set POSTGRES_PASSWORD to a non-empty value (the password of POSTGRES_USER, default
  "postgres"), or set POSTGRES_HOST_AUTH_METHOD=trust to accept every connection without a
  password (for tests only).
MSG
        exit 1
    fi
    if [ "$auth" = trust ]; then
        log "POSTGRES_HOST_AUTH_METHOD=trust: every connection is accepted without a password"
    fi

    local copied=""
    if template_fits; then
        cp -a --reflink=auto "$TEMPLATE/." "$PGDATA/"
        copied=1
    else
        run_initdb
    fi
    printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"

    local sockets
    sockets="$(mktemp -d)"
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c fsync=off -k $sockets" start
    export PGHOST="$sockets" PGPORT="${PGPORT:-5432}"
    if [ -n "$copied" ]; then adopt_template; fi
    export PGPASSWORD="${POSTGRES_PASSWORD:-}"

    if [ "$POSTGRES_DB" != postgres ]; then
        run_sql --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi

    local file
    for file in /docker-entrypoint-initdb.d/*; do
        [ -e "$file" ] || continue
        case "$file" in
            *.sh)
                if [ -x "$file" ]; then
                    log "running $file"
                    "$file"
                else
                    log "sourcing $file"
                    # shellcheck disable=SC1090
                    . "$file"
                fi
                ;;
            *.sql) log "running $file"; run_sql --dbname "$POSTGRES_DB" -f "$file" ;;
            *.sql.gz) log "running $file"; gunzip -c "$file" | run_sql --dbname "$POSTGRES_DB" ;;
            *) log "ignoring $file (not *.sh, *.sql or *.sql.gz)" ;;
        esac
    done

    pg_ctl -D "$PGDATA" -m fast -w stop
    unset PGHOST PGPASSWORD
    rm -rf "$sockets"
    log "initialization complete"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    initialize
fi

exec "$@"
