#!/usr/bin/env bash
# Reference solution: one jq program over the raw lines.
set -euo pipefail
cat > /app/summarize.sh <<'SH'
#!/usr/bin/env bash
# Summarise a JSON-lines access log (FILE, or standard input) as one JSON object.
set -euo pipefail
program='
  def num: type == "number";
  [inputs | select(test("\\S")) | (try fromjson catch null)
    | if type == "object" and (.status | num) and (.path | type == "string")
      then {record: .} else {skipped: true} end] as $lines
  | [$lines[] | select(has("record")) | .record] as $records
  | ($records | length) as $n
  | {
      requests: $n,
      skipped: ([$lines[] | select(has("skipped"))] | length),
      by_status: (reduce $records[] as $r ({}; .[$r.status | tostring] += 1)),
      top_paths: ([$records[].path] | group_by(.) | map({path: .[0], count: length})
                  | sort_by(-.count, .path) | .[:3]),
      bytes_total: ([$records[] | .bytes | select(num)] | add // 0),
      p95_duration_ms: ([$records[] | .duration_ms | select(num)] | sort
                        | if length == 0 then null
                          else .[((length * 95 + 99) / 100 | floor) - 1] end),
      error_rate: (if $n == 0 then 0
                   else ([$records[] | select(.status >= 500)] | length) / $n
                        | . * 10000 | round / 10000 end)
    }'
if [ $# -gt 0 ]; then
    jq -n -R "$program" "$1"
else
    jq -n -R "$program"
fi
SH
chmod +x /app/summarize.sh
