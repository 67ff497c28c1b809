#!/bin/sh
# manpage.sh PAGE COLLFUSE ENVGEN: the generated man page (build/collfuse.1)
# renders without a warning (groff -ww, and man -l where man-db is
# installed), its header names the program and its version, and the
# rendered text names every command and, under each command, every option
# that command's --help lists, its targets and its passes; its ENVIRONMENT
# section has exactly the variables of ir/env.c's table (ENVGEN:
# tests/gen_env_doc.c, which prints that table), in its order, each with
# its value and default. Prints one line per failure and exits 1 if there
# was any.
set -u
if [ $# -ne 3 ]; then
  echo "usage: manpage.sh PAGE COLLFUSE ENVGEN" >&2
  exit 2
fi
page=$1
cf=$2
envgen=$3
fails=0
fail() { echo "manpage.sh: $*" >&2; fails=$((fails + 1)); }
work=$(mktemp -d "${TMPDIR:-/tmp}/cf-man.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT

groff -man -Tutf8 -ww -z "$page" 2>"$work/warn" || fail "groff failed"
[ -s "$work/warn" ] && fail "groff warns: $(cat "$work/warn")"
# the text as a reader sees it, without bold or underline (-P-cbou)
LC_ALL=C.UTF-8 groff -man -Tutf8 -P-cbou -rLL=80n "$page" >"$work/text" 2>/dev/null
if command -v man >/dev/null 2>&1; then
  # (man strips the formatting itself when its output is not a terminal)
  LC_ALL=C.UTF-8 MANWIDTH=80 man -l "$page" >"$work/mantext" 2>"$work/manwarn" ||
    fail "man -l failed"
  [ -s "$work/manwarn" ] && fail "man -l warns: $(cat "$work/manwarn")"
  grep -q "^COLLFUSE(1)" "$work/mantext" || fail "man -l: no COLLFUSE(1) header"
fi
version=$("$cf" --version | sed 's/^collfuse //')
grep -q "^collfuse $version .*COLLFUSE(1)\$" "$work/text" || fail "footer does not name collfuse $version"
for s in NAME SYNOPSIS DESCRIPTION COMMANDS "EXIT STATUS" ENVIRONMENT FILES "SEE ALSO"; do
  grep -q "^$s\$" "$work/text" || fail "no section $s"
done

commands=$("$cf" --help | sed -n '/^commands:/,/^$/p' | awk 'NF && $1 != "commands:" && $1 != "bench" {print $1}')
benchmarks=$("$cf" bench --help | awk '$1 == "bench" {print $2}')
[ -n "$commands" ] && [ -n "$benchmarks" ] || fail "cannot read the commands from $cf --help"
for c in $commands $(for b in $benchmarks; do echo "bench:$b"; done); do
  cmd=$(echo "$c" | tr : ' ')
  # the command's section: from its heading to the next one
  awk -v h="   $cmd" '$0 == h {on = 1; next} on && /^   [a-z]/ {exit} on && /^[A-Z]/ {exit} on' \
    "$work/text" >"$work/section"
  [ -s "$work/section" ] || { fail "no section for '$cmd'"; continue; }
  grep -q "^       collfuse $cmd\\b" "$work/section" || fail "'$cmd': no synopsis line"
  for o in $("$cf" $cmd --help | sed -n '/^options:/,/^$/p' | grep -o -- '^  -[^ ,]*\(, --[^ ]*\)\?' | tr -d ','); do
    grep -q -- "^       $o\\b\\|^       .*, $o\\b\\|^       -[^ ]*, $o\\b" "$work/section" ||
      fail "'$cmd': option $o is not described"
  done
  for w in $("$cf" $cmd --help | sed -n 's/^\(targets\|passes\): //p'); do
    grep -q -- "[ ,]$w[,.]" "$work/section" || fail "'$cmd': $w is not listed"
  done
done

# ENVIRONMENT against the table: the variables (tag lines), in order, and
# each one's "Value: VALUE; default: DEFAULT." (the rendering drops the
# backticks, so the words are compared without them)
awk '/^ENVIRONMENT$/ {on = 1; next} on && /^[A-Z]/ {exit} on' "$work/text" >"$work/env"
"$envgen" | awk -F' [|] ' 'NR > 2 {gsub(/[`|]/, "", $1); sub(/^ */, "", $1); print $1}' >"$work/env_want"
[ -s "$work/env_want" ] || fail "$envgen printed no variable"
# (a tag shorter than the indent shares its line with the description: RANK;
# Open MPI's own names have lower case: OMPI_MCA_btl)
grep -E '^       [A-Z][A-Za-z0-9_]+( {2,}.*)?$' "$work/env" | awk '{print $1}' >"$work/env_got"
cmp -s "$work/env_want" "$work/env_got" ||
  fail "ENVIRONMENT's variables differ from ir/env.c's table: $(diff "$work/env_want" "$work/env_got" | grep '^[<>]' | tr '\n' ' ')"
tr '\n' ' ' <"$work/env" | tr -s ' ' >"$work/env_flat"
"$envgen" | awk -F' [|] ' 'NR > 2 {v = $2; d = $3; gsub(/[`]/, "", v); gsub(/[`]/, "", d); print "Value: " v "; default: " d "."}' |
  while IFS= read -r line; do
    grep -qF -- "$line" "$work/env_flat" || echo "$line"
  done >"$work/env_missing"
[ -s "$work/env_missing" ] && fail "ENVIRONMENT lacks: $(head -n 3 "$work/env_missing" | tr '\n' ' ')"

[ "$fails" -eq 0 ] || exit 1
echo "manpage.sh: ok"
