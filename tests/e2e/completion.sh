#!/usr/bin/env bash
# completion.sh COMPLETION COLLFUSE: drive the generated bash completion
# (build/collfuse.bash) as bash does on TAB: split the line at
# COMP_WORDBREAKS into COMP_WORDS, set COMP_CWORD, call the function that
# `complete -p collfuse` names and compare COMPREPLY. The lists it must
# offer (commands, benchmarks, options, targets, passes) are read from
# COLLFUSE's own --help, so the completion cannot drift from the parser.
# Prints one line per failure and exits 1 if there was any.
set -u
if [ $# -ne 2 ]; then
  echo "usage: completion.sh COMPLETION COLLFUSE" >&2
  exit 2
fi
cf=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
# shellcheck disable=SC1090
. "$1" || { echo "completion.sh: cannot source $1" >&2; exit 1; }
fails=0
fail() { echo "completion.sh: $*" >&2; fails=$((fails + 1)); }

spec=$(complete -p collfuse 2>&1)
[ "$spec" = "complete -F _collfuse collfuse" ] || fail "complete -p collfuse: $spec"
fn=${spec#complete -F }
fn=${fn%% *}

work=$(mktemp -d "${TMPDIR:-/tmp}/cf-comp.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
mkdir graphs
: >graphs/a.xml
: >graphs/b.hlo

# complete LINE: COMPREPLY for the end of LINE, sorted, one line
complete_line() {
  local line=$1 w='' c
  COMP_WORDS=()
  # split as readline does: blanks separate words, each of = and : is a word
  for ((i = 0; i < ${#line}; i++)); do
    c=${line:i:1}
    if [[ $c == ' ' ]]; then
      [[ -n $w ]] && COMP_WORDS+=("$w")
      w=''
    elif [[ $c == [=:] ]]; then
      [[ -n $w ]] && COMP_WORDS+=("$w")
      COMP_WORDS+=("$c")
      w=''
    else
      w+=$c
    fi
  done
  COMP_WORDS+=("$w")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  # after "=" or ":" the word being completed is the empty one that follows
  [[ -z $w && ${line: -1} == [=:] ]] && COMP_CWORD=$((COMP_CWORD - 1)) &&
    COMP_WORDS=("${COMP_WORDS[@]:0:${#COMP_WORDS[@]}-1}")
  COMP_LINE=$line COMP_POINT=${#line}
  COMPREPLY=()
  "$fn" collfuse "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}" 2>/dev/null
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}

expect() { # LINE WANT
  local got
  got=$(complete_line "$1")
  [ "$got" = "$2" ] || fail "'$1<TAB>': got '$got', want '$2'"
}

sorted() { printf '%s\n' "$@" | sort | tr '\n' ' ' | sed 's/ $//'; }

# the lists as the program itself prints them
targets=$("$cf" check --help | sed -n 's/^targets: //p')
passes=$("$cf" compile --help | sed -n 's/^passes: //p')
commands=$("$cf" --help | sed -n '/^commands:/,/^$/p' | awk 'NF && $1 != "commands:" && $1 != "bench" {print $1}')
benchmarks=$("$cf" bench --help | awk '$1 == "bench" {print $2}')
[ -n "$targets" ] && [ -n "$passes" ] && [ -n "$commands" ] && [ -n "$benchmarks" ] ||
  fail "cannot read the lists from $cf --help"

expect "collfuse comp" "compile"
expect "collfuse " "$(sorted $commands bench --help --version)"
expect "collfuse run --ta" "--target"
expect "collfuse check --target " "$(sorted $targets)"
expect "collfuse check --target atlas-a" "atlas-a2 atlas-a3"
expect "collfuse check --target=atlas-3" "atlas-310p"
expect "collfuse run --passes verify,fu" \
  "$(sorted $(for p in $passes; do case $p in fu*) echo "verify,$p" ;; esac; done))"
expect "collfuse run --passes=dce,fuse-all" "dce,fuse-allgather dce,fuse-allreduce dce,fuse-alltoall"
expect "collfuse bench " "$(sorted $benchmarks --help)"
expect "collfuse bench fusion --sp" "--split"
expect "collfuse run --algo r" "rd ring rsag"
expect "collfuse run --backend " "mpi shm threads"
expect "collfuse bench reduce --device " "cpu cuda"
expect "collfuse compile --split " "auto bytes: ddp: index: size:"
expect "collfuse compile --split by" "bytes:"
expect "collfuse compile --split bytes:" ""
expect "collfuse compile -O" "-O0"
expect "collfuse compile -v" "-v"
expect "collfuse compile graphs/" "graphs/a.xml graphs/b.hlo"
expect "collfuse compile graphs/a.xml -o graphs/b" "graphs/b.hlo"
expect "collfuse compile x.xml --emit-llvm graphs/a" "graphs/a.xml"
expect "collfuse compile x.xml --dot=graphs/b" "graphs/b.hlo"
expect "collfuse run g.xml --input x=graphs/a" "graphs/a.xml"
expect "collfuse run g.xml --save-outputs gr" "graphs"
expect "collfuse run g.xml --ranks " ""
expect "collfuse bench nosuch --" ""

# every option of every command's --help is offered after "-"
for c in $commands $(for b in $benchmarks; do echo "bench:$b"; done); do
  cmd=${c/:/ }
  want=$("$cf" $cmd --help | sed -n '/^options:/,/^$/p' | grep -o -- '^  -[^ ,]*\(, --[^ ]*\)\?' |
    tr -d ',' | tr -s ' ' '\n' | grep . | sort | tr '\n' ' ' | sed 's/ $//')
  got=$(complete_line "collfuse $cmd -" | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//')
  # -h is offered as --help
  want=$(echo "$want" | tr ' ' '\n' | grep -vx -- -h | tr '\n' ' ' | sed 's/ $//')
  [ "$got" = "$want" ] || fail "'collfuse $cmd -<TAB>': got '$got', want '$want'"
done

[ "$fails" -eq 0 ] || exit 1
echo "completion.sh: ok"
