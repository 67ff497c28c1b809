#!/bin/sh
# limits.sh COLLFUSE
#
# The input-limit cases too big to commit to tests/malformed/, generated in a
# temporary directory that is removed afterwards:
#   big.xml    a 300 MB sparse file: refused by size before a byte is read
#   many.xml   4,000,001 elements inside <graph>: refused by the element cap,
#              at the line of the first element over it (the root is the
#              first element, so that is the 4,000,000th <a/>, on line
#              4000002), before libxml2 builds a tree
#   /dev/zero  an endless stream: refused as a file before it is opened
#              (not a regular file), and as standard input (`check - <
#              /dev/zero`) once it passes the size limit
set -u

if [ $# -ne 1 ]; then
  echo "usage: limits.sh COLLFUSE" >&2
  exit 2
fi
cf=$1
here=$(cd "$(dirname "$0")" && pwd)
expect="$here/expect.sh"

dir=$(mktemp -d "${TMPDIR:-/tmp}/cf-limits.XXXXXX") || exit 2
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM

fails=0

truncate -s 300M "$dir/big.xml" || exit 2
sh "$expect" "$cf" 1 "big.xml: error: file is 314572800 bytes, above the limit" \
  -- check "$dir/big.xml" || fails=$((fails + 1))
rm -f "$dir/big.xml"

{
  printf '<?xml version="1.0" encoding="UTF-8"?>\n<graph name="many" version="1">\n'
  yes '<a/>' | head -n 4000001
  printf '</graph>\n'
} >"$dir/many.xml" || exit 2
sh "$expect" "$cf" 1 "many.xml:4000002: error: more than 4000000 XML elements" \
  -- check "$dir/many.xml" || fails=$((fails + 1))
rm -f "$dir/many.xml"

if [ -r /dev/zero ]; then
  sh "$expect" "$cf" 1 "/dev/zero: error: not a regular file (a character device)" \
    -- check /dev/zero || fails=$((fails + 1))
  sh "$expect" "$cf" 1 "<stdin>: error: file is larger than the limit" \
    -- check - </dev/zero || fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
  echo "limits.sh: $fails case(s) failed" >&2
  exit 1
fi
echo "limits.sh: all cases passed"
