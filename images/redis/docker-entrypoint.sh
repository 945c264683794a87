#!/usr/bin/env bash
# Entry point of envfarm's redis image, following the official image's conventions:
#   arguments starting with "-" (or a first argument ending in .conf) are options of
#   redis-server; without a config file that sets protected-mode, protected mode is turned off
#   so other containers of the environment can connect; the server runs as user redis in /data.
set -Eeuo pipefail

if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
    set -- redis-server "$@"
fi

if [ "$1" = redis-server ]; then
    shift
    config=()
    if [ $# -gt 0 ] && [ -f "$1" ]; then
        config=("$1")
        shift
    fi
    if [ ${#config[@]} -eq 0 ] || ! grep -q '^protected-mode' "${config[0]}"; then
        set -- --protected-mode no "$@"
    fi
    set -- redis-server "${config[@]}" "$@"
    if [ "$(id -u)" = 0 ]; then
        find . \! -user redis -exec chown redis '{}' +
        umask 0077
        exec setpriv --reuid=redis --regid=redis --init-groups "$@"
    fi
    umask 0077
fi

exec "$@"
