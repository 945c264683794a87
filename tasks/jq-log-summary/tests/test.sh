#!/usr/bin/env bash
# Runs /app/summarize.sh on hidden logs and compares its JSON with the expected summaries
# (both normalised by `jq -S`). reward.json: reward = checks passed / checks run.
set -u
mkdir -p /logs/verifier
cases=/tests/cases
script=/app/summarize.sh
passed=0
total=0

same_json() {  # $1: actual output, $2: expected file; exactly one JSON value, equal
    [ "$(printf '%s' "$1" | jq -s 'length' 2>/dev/null)" = "1" ] || return 1
    [ "$(printf '%s' "$1" | jq -S . 2>/dev/null)" = "$(jq -S . "$2")" ]
}

record() {  # $1: name, $2: 0 when the check passed
    total=$((total + 1))
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "PASS $1"; else echo "FAIL $1"; fi
}

for input in "$cases"/*.jsonl; do
    name=$(basename "$input" .jsonl)
    work=$(mktemp)
    cp "$input" "$work"
    actual=$(cd /tmp && timeout 30 "$script" "$work" 2>/dev/null)
    ok=$?
    [ $ok -eq 0 ] && same_json "$actual" "$cases/$name.expected.json" && cmp -s "$input" "$work"
    record "file:$name (output right, input unchanged)" $?
    rm -f "$work"
done

actual=$(timeout 30 "$script" < "$cases/mixed.jsonl" 2>/dev/null)
ok=$?
[ $ok -eq 0 ] && same_json "$actual" "$cases/mixed.expected.json"
record "stdin:mixed" $?

actual=$(timeout 30 "$script" /app/logs/access.jsonl 2>/dev/null)
ok=$?
[ $ok -eq 0 ] && same_json "$actual" "$cases/access.expected.json"
record "file:access" $?

reward=$(jq -n --argjson p "$passed" --argjson t "$total" '$p / $t')
printf '{"reward": %s, "checks_passed": %s, "checks_total": %s}\n' "$reward" "$passed" "$total" \
    > /logs/verifier/reward.json
cat /logs/verifier/reward.json
