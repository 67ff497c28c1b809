#!/usr/bin/python3
"""Docs that are tested: README.md and docs/*.md against the program.

    doctest.py commands BUILD SRC [--no-python]
                                    run every `$ ` command shown, compare output
    doctest.py code BUILD SRC [--no-python]
                                    compile and run the ```c blocks, run the
                                    ```python blocks
    doctest.py ops GEN SRC [--write]
                                    docs/format.md's ops and attributes section
                                    against tests/gen_ops_doc.c's output (GEN);
                                    --write rewrites the section
    doctest.py algos GEN SRC [--write]
                                    docs/executor.md's table of AllReduce
                                    algorithms against tests/gen_algo_doc.c's
                                    output (GEN), read off executor/algo.c's
                                    table; --write rewrites the section
    doctest.py env GEN SRC [--write]
                                    docs/cli.md's table of environment
                                    variables against tests/gen_env_doc.c's
                                    output (GEN), read off ir/env.c's table;
                                    --write rewrites the section
    doctest.py cli COLLFUSE SRC     docs/cli.md's commands, synopses and option
                                    tables against the program's --help

Conventions of the documents (README.md says them in short):

Commands. In a fenced code block, a line `$ CMD` is a command and the lines
after it, up to the next `$ ` line or the end of the block, are its output
(stdout and stderr together on a pseudo-terminal, as a user sees them).
Commands run with `sh -c` in a scratch directory that holds a link to every
top-level entry of the repository and `build` -> the build directory, so
`build/collfuse`, `examples/...` and `python` mean what they mean in a
checkout, and the files a command writes stay out of the source tree. The commands of one document
run in order in one scratch directory (a command may read what an earlier one
wrote); each gets a fresh kernel cache, so `-v` shows the JIT compiling. A
command must exit 0, unless its shown output has an `error:`, then non-zero.
Commands that are not to be run (make, mpirun, a GPU) are shown without `$ `.
--no-python (sanitizer builds, whose library cannot load into python3) skips
the commands and blocks that run python3.

Output matching, line by line after trailing blanks are dropped:
- a line `...` matches any number of lines (none too);
- `...` inside a line matches any text;
- a shown line that begins with blanks continues the line before it when that
  line starts with `{` or `[` (wrapped JSON): it is joined to it without the
  blanks, so wrap JSON only where the program's text has no blank.
Before comparing, run-dependent text is normalised in both the shown and the
program's output: a number before `ms`, `us`, `ns`, `s`, `GB/s`, `GiB/s` or
`MB/s`; the numbers in JSON members named `*_ms*`, `*_err*` and in
`"pass_ms":{...}`; the number after `max rel err` / `max abs err`; hex
strings of 16 digits or more (fingerprints, hashes); the scratch directory's
path. Everything else (counts, bytes, names, messages, order) must match.

Code. The ```c blocks of one document, in order, are the body of one `main`
(after `#include <collfuse/collfuse.h>` and the standard headers), compiled
with -Wall -Wextra -Werror against include/ and the build's libcollfuse.so
and run in the scratch directory; every call that returns `cf_status` must
return CF_OK (the harness checks each one and names its line in the
document). Each ```python block is one script, run with Debian's python3,
PYTHONPATH=python and COLLFUSE_LIBRARY=build/libcollfuse.so; a block that
imports torch is skipped when torch is missing.
"""

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# time limits stretch on slow builds and busy machines (tests/CMakeLists.txt)
TIME_SCALE = int(os.environ.get("CF_TEST_TIME_SCALE", "1"))

FAILED = []


def fail(where, msg):
    FAILED.append(where)
    print("FAIL %s: %s" % (where, msg))


def doc_files(src):
    files = ["README.md"]
    d = os.path.join(src, "docs")
    files += sorted("docs/" + f for f in os.listdir(d) if f.endswith(".md"))
    return files


def blocks(src, rel):
    """Yield (lang, first_line_no, lines) for each fenced block of a file."""
    lines = open(os.path.join(src, rel), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```\s*(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, start, body = m.group(1), i + 2, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            fail("%s:%d" % (rel, start - 1), "code block never closed")
        yield lang, start, body
        i += 1


def scratch_dir(src, build):
    tmp = tempfile.mkdtemp(prefix="cf-doctest-")
    for name in os.listdir(src):
        if name == ".git" or name == "build" or name.startswith("build-"):
            continue
        os.symlink(os.path.join(os.path.abspath(src), name), os.path.join(tmp, name))
    os.symlink(os.path.abspath(build), os.path.join(tmp, "build"))
    return tmp


# ---- commands -----------------------------------------------------------

NUM = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"


def normalise(text, tmp):
    text = text.replace(os.path.realpath(tmp), "<tmp>").replace(tmp, "<tmp>")
    text = re.sub(r"(?<![\w.])%s(\s?)(GB/s|GiB/s|MB/s|ms|us|ns|s)\b" % NUM, r"#\1\2", text)
    text = re.sub(r'("[a-z_]*_(?:ms|err)[a-z_]*":)%s' % NUM, r"\1#", text)
    text = re.sub(r'"(?:pass_ms|phase_s)":\{[^}]*\}',
                  lambda m: re.sub(r'(":)%s' % NUM, r"\1#", m.group(0)), text)
    text = re.sub(r"(max (?:rel|abs) err )%s" % NUM, r"\1#", text)
    text = re.sub(r"\b[0-9a-f]{16,}\b", "<hash>", text)
    return text


def shown_lines(lines):
    """Join wrapped JSON lines and drop trailing blank lines."""
    out = []
    for ln in lines:
        ln = ln.rstrip()
        if out and ln[:1] in (" ", "\t") and out[-1][:1] in ("{", "["):
            out[-1] += ln.lstrip()
        else:
            out.append(ln)
    while out and not out[-1]:
        out.pop()
    return out


def line_regex(pattern):
    return re.compile("".join(".*?" if p == "..." else re.escape(p)
                              for p in re.split(r"(\.\.\.)", pattern)) + r"\Z", re.S)


def match(patterns, actual):
    """Glob-match lines: a pattern line `...` spans any number of lines."""
    memo = {}

    def go(i, j):
        if (i, j) in memo:
            return memo[i, j]
        if i == len(patterns):
            r = j == len(actual)
        elif patterns[i] == "...":
            r = any(go(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            r = j < len(actual) and line_regex(patterns[i]).match(actual[j]) is not None \
                and go(i + 1, j + 1)
        memo[i, j] = r
        return r

    return go(0, 0)


def run_on_terminal(cmd, cwd, env, timeout):
    """Run cmd with stdout and stderr on one pseudo-terminal, so the two
    interleave as a user sees them; (exit code or None on timeout, text)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(["sh", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out, deadline = [], time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([master], [], [], left)[0]:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            os.close(master)
            return None, ""
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            data = b""
        if not data:
            break
        out.append(data)
    os.close(master)
    text = b"".join(out).decode("utf-8", "replace").replace("\r\n", "\n")
    # a progress line (tools/progress.c: "\r TEXT ESC[K", cleared by
    # "\r ESC[K") is gone from the screen once the command ends, as here
    return p.wait(), re.sub(r"\r[^\r\n]*?\x1b\[K", "", text)


def commands_of(src, rel):
    for lang, start, body in blocks(src, rel):
        cur = None
        for k, ln in enumerate(body):
            if ln.startswith("$ "):
                if cur:
                    yield cur
                cur = (start + k, ln[2:], [])
            elif cur:
                cur[2].append(ln)
        if cur:
            yield cur


def run_commands(build, src, python):
    n = 0
    for rel in doc_files(src):
        tmp = None
        for line, cmd, shown in commands_of(src, rel):
            where = "%s:%d" % (rel, line)
            if not python and "python3" in cmd:
                print("skip %s: python (sanitizer build)" % where)
                continue
            if tmp is None:
                tmp = scratch_dir(src, build)
            n += 1
            env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp(dir=tmp, prefix=".cache-"))
            rc, text = run_on_terminal(cmd, tmp, env, 300)
            if rc is None:
                fail(where, "`%s` did not finish in 300 s" % cmd)
                continue
            actual = [ln.rstrip() for ln in normalise(text, tmp).split("\n")]
            while actual and not actual[-1]:
                actual.pop()
            want = [normalise(ln, tmp) for ln in shown_lines(shown)]
            wants_error = any("error:" in ln for ln in want)
            if not match(want, actual):
                fail(where, "`%s`: output differs from the document\n--- shown (normalised)\n%s\n"
                     "--- printed (normalised, exit %d)\n%s\n---"
                     % (cmd, "\n".join(want), rc, "\n".join(actual)))
            elif wants_error != (rc != 0):
                fail(where, "`%s` exited %d; the document %s" %
                     (cmd, rc, "shows an error" if wants_error else "shows no error"))
            else:
                print("ok %s: %s" % (where, cmd))
        if tmp:
            shutil.rmtree(tmp)
    if n == 0:
        fail("docs", "no `$ ` commands found")


# ---- code blocks ----------------------------------------------------------

HARNESS_HEAD = r"""#include <collfuse/collfuse.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cf_context *doc_ctx; /* the first context a block creates, for messages */

static inline cf_status doc_check(cf_status st, const char *call, const char *file, int line) {
  if (st != CF_OK) {
    fprintf(stderr, "%s:%d: %s returned %d: %s\n", file, line, call, (int)st,
            doc_ctx ? cf_context_errmsg(doc_ctx) : "(no context)");
    exit(1);
  }
  return st;
}

static inline cf_status doc_check_ctx(cf_status st, cf_context **ctx, const char *file, int line) {
  doc_check(st, "cf_context_create", file, line);
  if (!doc_ctx) doc_ctx = *ctx;
  return st;
}
"""


def status_functions(src):
    text = open(os.path.join(src, "include/collfuse/collfuse.h"), encoding="utf-8").read()
    return sorted(set(re.findall(r"^cf_status\s+(cf_\w+)\s*\(", text, re.M)))


def c_program(src, rel, cblocks):
    out = [HARNESS_HEAD]
    for fn in status_functions(src):
        if fn == "cf_context_create":
            out.append("#define cf_context_create(p) doc_check_ctx((cf_context_create)(p), (p), "
                       "__FILE__, __LINE__)")
        else:
            out.append("#define %s(...) doc_check((%s)(__VA_ARGS__), \"%s\", __FILE__, __LINE__)"
                       % (fn, fn, fn))
    out.append("int main(void) {")
    for start, body in cblocks:
        out.append('#line %d "%s"' % (start, rel))
        out.extend(body)
    out.append("  return 0;\n}\n")
    return "\n".join(out)


def run_code(build, src, python):
    tmp = scratch_dir(src, build)
    lib = os.path.join(os.path.abspath(build), "libcollfuse.so")
    cc = os.environ.get("CC", "cc")
    flags = os.environ.get("CF_CONSUMER_FLAGS", "").split()
    have_torch = None
    n = 0
    for rel in doc_files(src):
        cblocks = []
        for lang, start, body in blocks(src, rel):
            where = "%s:%d" % (rel, start - 1)
            if lang == "c":
                cblocks.append((start, body))
            elif lang == "python":
                n += 1
                if not python:
                    print("skip %s: python (sanitizer build)" % where)
                    continue
                code = "\n".join(body) + "\n"
                if re.search(r"^\s*import torch|^\s*from torch", code, re.M):
                    if have_torch is None:
                        have_torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                                                    capture_output=True).returncode == 0
                    if not have_torch:
                        print("skip %s: torch is missing (Debian: python3-torch)" % where)
                        continue
                script = os.path.join(tmp, "block_%d.py" % start)
                open(script, "w").write("\n" * (start - 1) + code)  # line numbers as in the doc
                env = dict(os.environ, PYTHONPATH=os.path.join(src, "python"),
                           COLLFUSE_LIBRARY=lib, PYTHONDONTWRITEBYTECODE="1")
                p = subprocess.run(["/usr/bin/python3", script], cwd=tmp, env=env, timeout=300 * TIME_SCALE,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                if p.returncode != 0:
                    fail(where, "python block exited %d:\n%s" % (p.returncode,
                         p.stdout.decode("utf-8", "replace").replace(script, rel)))
                else:
                    print("ok %s: python block" % where)
        if not cblocks:
            continue
        n += 1
        where = "%s (C blocks at lines %s)" % (rel, ", ".join(str(s - 1) for s, _ in cblocks))
        csrc = os.path.join(tmp, os.path.basename(rel) + ".c")
        exe = csrc[:-2]
        open(csrc, "w").write(c_program(src, rel, cblocks))
        p = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror"] + flags +
                           ["-I", os.path.join(src, "include"), "-o", exe, csrc, lib,
                            "-Wl,-rpath," + os.path.dirname(lib)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            fail(where, "does not compile:\n" + p.stdout.decode("utf-8", "replace"))
            continue
        p = subprocess.run([exe], cwd=tmp, timeout=300 * TIME_SCALE,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            fail(where, "exited %d:\n%s" % (p.returncode, p.stdout.decode("utf-8", "replace")))
        else:
            print("ok %s" % where)
    shutil.rmtree(tmp)
    if n == 0:
        fail("docs", "no code blocks found")


# ---- generated sections: docs/format.md's ops, docs/executor.md's algorithms

# A generated section: the lines between BEGIN and END markers of a page,
# which a test-only program prints from the program's own table.
GENERATED = {
    # mode: (page, the table it comes from, what it holds, the target that rewrites it)
    "ops": ("docs/format.md", "ir/ops.def", "ops and attributes", "doc-ops"),
    "algos": ("docs/executor.md", "executor/algo.c", "AllReduce algorithms", "doc-algos"),
    "env": ("docs/cli.md", "ir/env.c", "environment variables", "doc-env"),
}


def check_generated(mode, gen, src, write):
    page, table, what, target = GENERATED[mode]
    begin, end = "<!-- BEGIN generated from %s" % table, "<!-- END generated from %s -->" % table
    path = os.path.join(src, page)
    text = open(path, encoding="utf-8").read()
    b = text.find(begin)
    e = text.find(end)
    if b < 0 or e < b:
        fail(page, "no section between '%s ...' and '%s'" % (begin, end))
        return
    b = text.index("\n", b) + 1
    want = subprocess.run([gen], check=True, stdout=subprocess.PIPE).stdout.decode("utf-8")
    have = text[b:e]
    if have == want:
        print("ok %s: %s match %s" % (page, what, table))
    elif write:
        open(path, "w", encoding="utf-8").write(text[:b] + want + text[e:])
        print("%s: %s rewritten from %s" % (page, what, table))
    else:
        import difflib
        diff = difflib.unified_diff(have.splitlines(), want.splitlines(), page, table, lineterm="")
        fail(page, "the %s differ from %s (regenerate: cmake --build BUILD --target %s)\n"
             % (what, table, target) + "\n".join(diff))


# ---- docs/cli.md against --help --------------------------------------------
#
# A command section of docs/cli.md is a heading whose text is a command as
# typed after `collfuse` (`## run`, `### bench fusion`: lowercase words); a
# heading that only groups others (`## bench`) is no command. Its first code
# block is the synopsis, which must equal the usage line(s) of `collfuse CMD
# --help` (whitespace aside), and its first table whose header starts
# `| option |` lists its options: every spelling in the first column (`-v`,
# `--verbose`, without the value) must be one the help lists and every option
# the help lists must have a row (-h/--help aside: the conventions cover
# them). The sections are the commands and benchmarks `collfuse --help` and
# `collfuse bench --help` list, no more, no fewer; so is the page's opening
# synopsis. A `collfuse CMD ...` line in a section's code blocks uses only
# options of CMD, and so does a paragraph of the other documents that links
# CMD's section or names `collfuse CMD --help`.

CLI_DOC = "docs/cli.md"


def help_of(exe, args):
    p = subprocess.run([exe] + args + ["--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60 * TIME_SCALE)
    text = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        fail(CLI_DOC, "`collfuse %s --help` exited %d:\n%s"
             % (" ".join(args), p.returncode, text))
    return text


def help_commands(text, heading):
    """The names in a help's `commands:` or `benchmarks:` list."""
    names, on = [], False
    for ln in text.split("\n"):
        if ln == heading:
            on = True
        elif on and not ln.strip():
            break
        elif on:
            words = []
            for w in re.split(r"\s{2,}", ln.strip())[0].split():
                if not re.fullmatch(r"[a-z][a-z0-9-]*", w):
                    break
                words.append(w)
            if words:
                names.append(" ".join(words))
    return names


def help_usage(text):
    """The usage lines, joined, without `usage: `, whitespace normalised."""
    lines = text.split("\n")
    out = []
    for ln in lines:
        if not ln.strip():
            break
        out.append(ln)
    return " ".join(" ".join(out).split())[len("usage: "):] if out else ""


def help_options(text):
    """Every spelling the help's option list names, -h/--help aside."""
    opts, on = set(), False
    for ln in text.split("\n"):
        if ln == "options:":
            on = True
        elif on and not ln.strip():
            break
        elif on and re.match(r"  -", ln):
            left = re.split(r"\s{2,}", ln.strip())[0]
            opts.update(part.split()[0] for part in left.split(", "))
    return opts - {"-h", "--help"}


def cli_sections(src):
    """{name: (heading line, synopsis (line, text) or None, table (line, rows) or None,
    [(line, text) of code lines])} for docs/cli.md's command sections, and
    the page's opening synopsis as (line, lines)."""
    lines = open(os.path.join(src, CLI_DOC), encoding="utf-8").read().split("\n")
    sections, cur, opening, fence = {}, None, None, None
    for i, ln in enumerate(lines, 1):
        if ln.startswith("```"):
            if fence is None:
                fence = (i, [])
                continue
            start, body = fence
            fence = None
            if opening is None and cur is None:
                opening = (start + 1, body)
            if cur is not None:
                if cur["synopsis"] is None:
                    cur["synopsis"] = (start + 1, " ".join(" ".join(body).split()))
                cur["code"] += [(start + 1 + k, b) for k, b in enumerate(body)]
            continue
        if fence is not None:
            fence[1].append(ln)
            continue
        m = re.match(r"^(#{2,})\s+(.*?)\s*$", ln)
        if m:
            name = m.group(2)
            cur = None
            if re.fullmatch(r"[a-z][a-z0-9-]*( [a-z][a-z0-9-]*)*", name):
                if name in sections:
                    fail("%s:%d" % (CLI_DOC, i), "a second section '%s'" % name)
                cur = sections[name] = {"line": i, "synopsis": None, "table": None,
                                        "code": [], "in_table": False}
            continue
        if cur is None:
            continue
        if cur["table"] is None and re.match(r"^\|\s*option\s*\|", ln):
            cur["table"], cur["in_table"] = (i, []), True
        elif cur["in_table"] and ln.startswith("|"):
            if not re.match(r"^\|[\s:|-]+\|\s*$", ln):  # not the |---| line
                cur["table"][1].append((i, ln.split("|")[1]))
        else:
            cur["in_table"] = False
    # a heading that only groups other sections (## bench) is no command
    for name in [n for n in sections if any(o.startswith(n + " ") for o in sections)]:
        if sections[name]["synopsis"] or sections[name]["table"]:
            fail("%s:%d" % (CLI_DOC, sections[name]["line"]),
                 "'%s' groups other sections but has a synopsis or an options table" % name)
        del sections[name]
    return sections, opening


def row_options(cell):
    """`-v`, `--verbose` -> {-v, --verbose}; `--target T` -> {--target}."""
    return {re.split(r"[\s=]", span.strip())[0]
            for span in re.findall(r"`([^`]*)`", cell) if span.strip().startswith("-")}


def check_cli_links(src, options):
    """A paragraph of README.md, docs/*.md or bench/README.md that links a
    command's section of docs/cli.md (`cli.md#run`) or names its help
    (`collfuse run --help`) names only options of that command."""
    anchors = {n.replace(" ", "-"): n for n in options}
    failed = len(FAILED)
    for rel in doc_files(src) + ["bench/README.md"]:
        if rel == CLI_DOC:
            continue
        lines = open(os.path.join(src, rel), encoding="utf-8").read().split("\n")
        start = 0
        for i in range(len(lines) + 1):
            if i < len(lines) and lines[i].strip():
                continue
            para = " ".join(lines[start:i])
            cmds = {anchors[a] for a in re.findall(r"cli\.md#([a-z-]+)", para) if a in anchors}
            cmds |= {c for c in re.findall(r"`collfuse ([a-z]+(?: [a-z]+)?) --help`", para)
                     if c in options}
            for c in sorted(cmds):
                for span in re.findall(r"`(-[^`]*)`", para):
                    o = re.split(r"[\s=]", span)[0]
                    if o not in options[c]:
                        fail("%s:%d" % (rel, start + 1), "names %s with `collfuse %s`, which "
                             "does not take it" % (o, c))
            start = i + 1
    if len(FAILED) == failed:
        print("ok options named next to links to docs/cli.md's sections")


def check_cli(exe, src):
    top = help_of(exe, [])
    bench = help_of(exe, ["bench"])
    program = help_commands(top, "commands:")
    for b in help_commands(bench, "benchmarks:"):
        if b not in program:
            program.append(b)
    if not program:
        fail(CLI_DOC, "`collfuse --help` lists no commands")
        return
    helps = {name: help_of(exe, name.split()) for name in program}
    options = {name: help_options(text) for name, text in helps.items()}
    check_cli_links(src, options)
    sections, opening = cli_sections(src)
    for name in program:
        if name not in sections:
            fail(CLI_DOC, "`collfuse --help` lists the command '%s', which has no section "
                 "(## %s)" % (name, name))
    for name, sec in sections.items():
        if name not in program:
            fail("%s:%d" % (CLI_DOC, sec["line"]), "a section '%s', a command `collfuse --help` "
                 "does not list" % name)
    # the page's opening synopsis: one `collfuse CMD` line per command
    if opening is None:
        fail(CLI_DOC, "no opening synopsis")
    else:
        shown = {}
        for k, ln in enumerate(opening[1]):
            w = ln.split()
            if len(w) >= 2 and w[0] == "collfuse" and not w[1].startswith("-"):
                subs = w[2].split("|") if w[1] == "bench" and len(w) > 2 else [None]
                for s in subs:
                    shown[w[1] + (" " + s if s else "")] = opening[0] + k
        for name in program:
            if name not in shown:
                fail(CLI_DOC, "the opening synopsis (line %d) lacks '%s'" % (opening[0], name))
        for name, line in shown.items():
            if name not in program:
                fail("%s:%d" % (CLI_DOC, line), "the opening synopsis shows '%s', a command "
                     "`collfuse --help` does not list" % name)
    for name in program:
        sec = sections.get(name)
        if sec is None:
            continue
        text = helps[name]
        failed = len(FAILED)
        where = "%s:%d" % (CLI_DOC, sec["line"])
        usage = help_usage(text)
        if not usage.startswith("collfuse " + name):
            fail(where, "`collfuse %s --help` prints no usage line" % name)
        if sec["synopsis"] is None:
            fail(where, "%s: no synopsis block" % name)
        elif sec["synopsis"][1] != usage:
            fail("%s:%d" % (CLI_DOC, sec["synopsis"][0]),
                 "%s: the synopsis differs from `collfuse %s --help`'s usage\n  doc:  %s\n"
                 "  help: %s" % (name, name, sec["synopsis"][1], usage))
        opts = options[name]
        if not opts:
            fail(where, "`collfuse %s --help` lists no options" % name)
        if sec["table"] is None:
            fail(where, "%s: no options table (| option | value | default | meaning |)" % name)
            continue
        documented = {}
        for line, cell in sec["table"][1]:
            got = row_options(cell)
            if not got:
                fail("%s:%d" % (CLI_DOC, line), "%s: a row that names no option" % name)
            for o in got:
                if o in documented:
                    fail("%s:%d" % (CLI_DOC, line), "%s: option %s has a second row (line %d)"
                         % (name, o, documented[o]))
                documented[o] = line
        for o in sorted(opts - set(documented)):
            fail("%s:%d" % (CLI_DOC, sec["table"][0]), "%s: option %s is in `collfuse %s "
                 "--help` but not in the options table" % (name, o, name))
        for o in sorted(set(documented) - opts - {"-h", "--help"}):
            fail("%s:%d" % (CLI_DOC, documented[o]), "%s: the options table lists %s, which "
                 "`collfuse %s --help` does not" % (name, o, name))
        # the section's command lines use only this command's options
        for line, ln in sec["code"]:
            m = re.search(r"(?:^|\s)collfuse %s(\s|$)" % re.escape(name), ln)
            if not m:
                continue
            for o in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", ln[m.end():]):
                if o not in opts and o not in ("-h", "--help"):
                    fail("%s:%d" % (CLI_DOC, line), "%s: `%s` uses %s, which `collfuse %s "
                         "--help` does not list" % (name, ln.strip(), o, name))
        if len(FAILED) == failed:
            print("ok %s: %s" % (where, name))


def main(argv):
    if len(argv) < 4 or argv[1] not in ("commands", "code", "ops", "algos", "env", "cli"):
        sys.stderr.write(__doc__)
        return 2
    mode, first, src = argv[1], os.path.abspath(argv[2]), os.path.abspath(argv[3])
    if mode == "commands":
        run_commands(first, src, "--no-python" not in argv[4:])
    elif mode == "code":
        run_code(first, src, "--no-python" not in argv[4:])
    elif mode == "cli":
        check_cli(first, src)
    else:
        check_generated(mode, first, src, "--write" in argv[4:])
    if FAILED:
        print("%d failed: %s" % (len(FAILED), ", ".join(FAILED)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
