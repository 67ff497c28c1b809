#!/bin/sh
# exports.sh LIBRARY HEADER: the shared library's exported functions are
# exactly the functions the public header declares - no internal function
# leaks into the ABI (api/CMakeLists.txt's version script), and no declared
# one is missing. The header is read here on its own terms (every cf_NAME
# followed by '('), not through the build's list.
set -eu
LIB=$1
HDR=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
grep -oE '\bcf_[a-z0-9_]+\(' "$HDR" | tr -d '(' | sort -u >"$tmp/declared"
nm -D --defined-only "$LIB" | awk '$2 == "T" || $2 == "D" || $2 == "B" || $2 == "R" { print $3 }' |
  sort -u >"$tmp/exported"
[ -s "$tmp/declared" ] || { echo "exports.sh: no cf_ functions in $HDR" >&2; exit 1; }
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
  echo "exports.sh: $LIB exports other symbols than $HDR declares:" >&2
  comm -13 "$tmp/declared" "$tmp/exported" | sed 's/^/  not declared: /' >&2
  comm -23 "$tmp/declared" "$tmp/exported" | sed 's/^/  not exported: /' >&2
  exit 1
fi
echo "exports: $(wc -l <"$tmp/declared") functions, as declared"
