#!/usr/bin/env bash
# Reference solution: hash every non-empty regular file, group equal hashes with awk.
set -euo pipefail
mkdir -p /app/bin
cat > /app/bin/dupes.sh <<'SH'
#!/usr/bin/env bash
# dupes.sh [--delete] DIR: print groups of identical files, one tab-separated line per group.
set -euo pipefail
export LC_ALL=C
delete=0
if [ "${1:-}" = "--delete" ]; then
    delete=1
    shift
fi
if [ $# -ne 1 ]; then
    echo "usage: dupes.sh [--delete] DIR" >&2
    exit 2
fi
if [ ! -d "$1" ]; then
    echo "dupes.sh: $1: not a directory" >&2
    exit 2
fi
cd "$1"
groups=$(
    find . -type f ! -empty -print0 | xargs -0 -r sha256sum \
        | sed 's#^\([0-9a-f]*\)  \./#\1\t#' \
        | sort -t "$(printf '\t')" -k1,1 -k2 \
        | awk -F '\t' '
            $1 == hash { line = line "\t" $2; n++; next }
            { if (n > 1) print line; hash = $1; line = $2; n = 1 }
            END { if (n > 1) print line }' \
        | sort -t "$(printf '\t')" -k1,1
)
[ -n "$groups" ] || exit 0
printf '%s\n' "$groups"
if [ "$delete" -eq 1 ]; then
    while IFS=$'\t' read -r -a paths; do
        rm -f -- "${paths[@]:1}"
    done <<< "$groups"
fi
SH
chmod +x /app/bin/dupes.sh
