#!/usr/bin/env bash
# Builds directory trees, runs /app/bin/dupes.sh on them and compares output, exit status and
# the files left behind. reward.json: reward = checks passed / checks run.
set -u
mkdir -p /logs/verifier
export LC_ALL=C
script=/app/bin/dupes.sh
TAB=$'\t'
passed=0
total=0

record() {  # $1: name, $2: 0 when the check passed
    total=$((total + 1))
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "PASS $1"; else echo "FAIL $1"; fi
}

put() {  # put FILE CONTENT: create FILE (and its directories) below $tree
    mkdir -p "$(dirname "$tree/$1")"
    printf '%s' "$2" > "$tree/$1"
}

run() {  # run ARGS...: stdout to $out, stderr to $err, exit status to $status
    out=$(timeout 30 "$script" "$@" 2>/tmp/dupes-err)
    status=$?
    err=$(cat /tmp/dupes-err)
}

expect() {  # expect NAME EXPECTED_STDOUT
    [ "$status" -eq 0 ] && [ "$out" = "$2" ]
    record "$1" $?
}

new_tree() { tree=$(mktemp -d); }

new_tree
put a.txt "same"; put b.txt "same"; put c.txt "other"
run "$tree"
expect "pair" "a.txt${TAB}b.txt"

new_tree
put "dir one/x.log" "alpha"; put ".hidden/y" "alpha"; put "z z" "alpha"
put "sub/deep/p" "beta-content"; put "a/q" "beta-content"; put "solo" "gamma"
run "$tree"
expect "nested, hidden, spaces, two groups" \
    ".hidden/y${TAB}dir one/x.log${TAB}z z"$'\n'"a/q${TAB}sub/deep/p"

new_tree
put same1 "12345"; put same2 "12345"; put size1 "abcde"; put size2 "vwxyz"
run "$tree"
expect "equal size is not enough" "same1${TAB}same2"

new_tree
put e1 ""; put e2 ""; put real "data"; ln -s real "$tree/link"; ln -s real "$tree/link2"
run "$tree"
expect "empty files and symlinks ignored" ""

new_tree
put B "x"; put a "x"; put _c "x"; put d/A "y"; put C "y"
run "$tree"
expect "byte order" "B${TAB}_c${TAB}a"$'\n'"C${TAB}d/A"

new_tree
put one "1"; put two "2"
run "$tree"
expect "no duplicates" ""

new_tree
put "k/keep me" "dup"; put "k/later" "dup"; put "m" "dup"; put other "x"; put other2 "y"
run --delete "$tree"
[ "$status" -eq 0 ] && [ "$out" = "k/keep me${TAB}k/later${TAB}m" ] \
    && [ -f "$tree/k/keep me" ] && [ ! -e "$tree/k/later" ] && [ ! -e "$tree/m" ] \
    && [ -f "$tree/other" ] && [ -f "$tree/other2" ]
record "--delete keeps the first of each group" $?

new_tree
put x "1"; put y "1"
run "$tree/missing"
[ "$status" -eq 2 ] && [ -z "$out" ] && [ -n "$err" ]
record "missing directory" $?
run
[ "$status" -eq 2 ] && [ -z "$out" ] && [ -n "$err" ]
record "no argument" $?
run "$tree/x"
[ "$status" -eq 2 ] && [ -z "$out" ] && [ -n "$err" ]
record "a file is not a directory" $?

new_tree
put "r/one" "relative"; put "r/two" "relative"
out=$(cd "$tree" && timeout 30 "$script" r 2>/dev/null)
status=$?
expect "relative DIR" "one${TAB}two"

printf '{"reward": %s, "checks_passed": %s, "checks_total": %s}\n' \
    "$(awk -v p="$passed" -v t="$total" 'BEGIN { printf "%.6g", p / t }')" "$passed" "$total" \
    > /logs/verifier/reward.json
cat /logs/verifier/reward.json
