# common.sh — sourced by the tests of tests/dist: a scratch folder $TMP
# (removed at exit), failures counted by fail, and timing helpers (now,
# elapsed SINCE, under SECONDS LIMIT).
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
under() { awk -v t="$1" -v lim="$2" 'BEGIN { exit !(t < lim) }'; }
