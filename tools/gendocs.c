/* gendocs.c - the man page collfuse(1) and the bash completion, written
 * from the tables that drive the parser and --help (cf_commands, each
 * command's cf_opt rows, cf_target_name, cf_pass_registry).
 *
 * Built with the driver's objects but not installed: the build runs
 * `collfuse-gendocs man collfuse.1` and `collfuse-gendocs bash
 * collfuse.bash`, so neither file can drift from what the parser accepts.
 * What an option's value completes to is read off its row: its choices, its
 * check (a target profile, a pass list, a split spec) or its value's name
 * (OUT..., ...FILE..., DIR: file or directory names).
 */
#include "tools.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CF_INSTALL_DATADIR
#define CF_INSTALL_DATADIR "/usr/local/share"
#endif

/* ---------------- roff ---------------- */

/* One line of text for roff: backslashes escaped, every '-' of a word that
 * starts with '-' (an option) made a minus sign, a word with a hyphen inside
 * (fuse-allreduce, atlas-a2) never broken, a leading '.' or '\'' kept
 * literal. */
static void roff(FILE *f, const char *s, size_t n) {
  bool opt_word = false;
  if (n && (s[0] == '.' || s[0] == '\'')) fputs("\\&", f);
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (i == 0 || strchr(" [(|,/=", s[i - 1])) opt_word = c == '-';
    if ((i == 0 || s[i - 1] == ' ') && c != ' ' && c != '-') {
      size_t k = strcspn(s + i, " ");
      const char *h = memchr(s + i, '-', k < n - i ? k : n - i);
      if (h) fputs("\\%", f);
    }
    if (c == '\\')
      fputs("\\e", f);
    else if (c == '-' && opt_word)
      fputs("\\-", f);
    else
      fputc(c, f);
  }
}

static void roff_str(FILE *f, const char *s) { roff(f, s, strlen(s)); }

/* Prose of '\n'-separated lines: plain lines fill a paragraph, lines that
 * start with a space (an example, a list item) are kept as they are. */
static void roff_prose(FILE *f, const char *text) {
  bool literal = false;
  for (const char *p = text; *p;) {
    size_t k = strcspn(p, "\n");
    if (k) {
      if ((p[0] == ' ') != literal) fputs((literal = !literal) ? ".nf\n" : ".fi\n", f);
      roff(f, p, k);
      fputc('\n', f);
    }
    p += k + (p[k] == '\n');
  }
  if (literal) fputs(".fi\n", f);
}

/* Text with `literal` words (ir/env.c's meanings): those in bold. */
static void roff_ticks(FILE *f, const char *text) {
  for (const char *p = text; *p;) {
    const char *q = strchr(p, '`');
    if (!q) {
      roff_str(f, p);
      return;
    }
    roff(f, p, (size_t)(q - p));
    const char *e = strchr(q + 1, '`');
    if (!e) e = q + 1 + strlen(q + 1);
    fputs("\\fB", f);
    roff(f, q + 1, (size_t)(e - q - 1));
    fputs("\\fR", f);
    p = *e ? e + 1 : e;
  }
}

/* ENVIRONMENT: every row of ir/env.c's table. */
static void man_environment(FILE *f) {
  fputs(".SH ENVIRONMENT\n", f);
  for (int v = 0; v < CF_ENV_COUNT; v++) {
    const cf_env_knob *k = &cf_env_table[v];
    fprintf(f, ".TP\n.B %s\n", k->name);
    roff_ticks(f, k->doc);
    fputs("\n.br\nValue: ", f);
    roff_ticks(f, k->value);
    fputs("; default: ", f);
    roff_ticks(f, k->dflt);
    fputs(".\n", f);
  }
}

static const char *value_name(const cf_opt *o, char *buf) {
  return o->value ? o->value : cf_opt_choices(o, buf);
}

/* "[\fB--name\fR \fIVALUE\fR]..." */
static void roff_synopsis_item(FILE *f, const cf_opt *o) {
  fputs("[\\fB", f);
  roff_str(f, o->name);
  fputs("\\fR", f);
  char buf[CF_OPT_CHOICES_MAX];
  if (value_name(o, buf)) {
    fputs("\\ \\fI", f); /* an unbreakable space: option and value stay on one line */
    roff_str(f, value_name(o, buf));
    fputs("\\fR", f);
  }
  fputs(o->kind == CF_OPT_LIST ? "]...\n" : "]\n", f);
}

static void man_command(FILE *f, const cf_command *c) {
  fprintf(f, ".SS \"%s\"\n", c->name);
  roff_prose(f, c->summary);
  fprintf(f, ".PP\n.B collfuse %s\n", c->name);
  if (c->args) {
    fputs(".I ", f);
    roff_str(f, c->args);
    fputc('\n', f);
  }
  for (const cf_opt *o = c->opts; o && o->name; o++)
    roff_synopsis_item(f, o);
  if (c->about) {
    fputs(".PP\n", f);
    roff_prose(f, c->about);
  }
  for (const cf_opt *o = c->opts; o && o->name; o++) {
    fputs(".TP\n\\fB", f);
    roff_str(f, o->name);
    if (o->alias) {
      fputs("\\fR, \\fB", f);
      roff_str(f, o->alias);
    }
    fputs("\\fR", f);
    char buf[CF_OPT_CHOICES_MAX];
    if (value_name(o, buf)) {
      fputs(" \\fI", f);
      roff_str(f, value_name(o, buf));
      fputs("\\fR", f);
    }
    fputc('\n', f);
    roff_prose(f, o->help);
  }
  fputs(".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nprint this help\n", f);
  if (c->after) {
    fputs(".PP\n", f);
    roff_prose(f, c->after);
  }
  bool targets = false, passes = false;
  for (const cf_opt *o = c->opts; o && o->name; o++) {
    targets |= o->check == cf_opt_check_target;
    passes |= o->check == cf_opt_check_passes;
  }
  if (targets) {
    fputs(".PP\nTargets:", f);
    for (size_t i = 0; cf_target_name(i); i++) {
      fputs(i ? ", " : " ", f);
      roff_str(f, cf_target_name(i));
    }
    fputs(".\n", f);
  }
  if (passes) {
    fputs(".PP\nPasses:", f);
    for (int k = 0; cf_pass_registry[k]; k++) {
      fputs(k ? ", " : " ", f);
      roff_str(f, cf_pass_registry[k]->name);
    }
    fputs(".\n", f);
  }
}

static void man_page(FILE *f) {
  char about[1024];
  cf_tool_about(about, sizeof about);
  fprintf(f,
          ".\\\" collfuse(1), written by tools/gendocs.c from the driver's option tables.\n"
          ".TH COLLFUSE 1 \"\" \"collfuse %s\" \"User Commands\"\n"
          ".\\\" no hyphenation, ragged right: option names stay whole words\n"
          ".nh\n.ad l\n"
          ".SH NAME\n"
          "collfuse \\- compile, run and draw graphs of collective operations\n"
          ".SH SYNOPSIS\n"
          ".B collfuse\n.I COMMAND\n.RI [ options ]\n"
          ".br\n.B collfuse bench\n.I BENCHMARK\n.RI [ options ]\n"
          ".br\n.B collfuse\n.I COMMAND\n.B \\-\\-help\n"
          ".br\n.B collfuse \\-\\-version\n"
          ".SH DESCRIPTION\n",
          cf_version());
  roff_prose(f, about);
  fputs(".PP\n", f);
  roff_prose(f, cf_tool_std_note);
  fputs(".PP\nCommands:", f);
  for (int i = 0; cf_commands[i]; i++)
    fprintf(f, "%s \\fB%s\\fR", i ? "," : "", cf_commands[i]->name);
  fputs(".\n.SH COMMANDS\n", f);
  for (int i = 0; cf_commands[i]; i++)
    man_command(f, cf_commands[i]);
  fputs(
      ".SH EXIT STATUS\n"
      ".TP\n.B 0\nsuccess\n"
      ".TP\n.B 1\ninvalid input, failed verification, an output that cannot be written, or a run\n"
      "whose results do not match (\\fB\\-\\-verify\\fR)\n"
      ".TP\n.B 2\nusage error: an unknown command or option, or a value out of range\n"
      ".TP\n.B 3\nruntime failure: out of memory, a rank that failed or timed out\n",
      f);
  man_environment(f);
  fputs(
      ".SH FILES\n"
      ".TP\n.I " CF_INSTALL_DATADIR "/collfuse/collfuse-graph.xsd\n"
      "the XML Schema of collfuse's native graph format (the same schema is built "
      "into the library)\n"
      ".TP\n.I ~/.cache/collfuse\nthe kernel cache (see \\fBCOLLFUSE_CACHE\\fR)\n"
      ".SH SEE ALSO\n"
      ".BR mpirun (1),\n.BR dot (1)\n",
      f);
}

/* ---------------- bash completion ---------------- */

/* What a value of o completes to: NULL for a flag. */
static const char *value_kind(const cf_opt *o) {
  const char *v = o->value ? o->value : "";
  if (o->kind == CF_OPT_FLAG) return NULL;
  if (o->choices || o->choices_of) return "choice";
  if (o->check == cf_opt_check_target) return "target";
  if (o->check == cf_opt_check_passes) return "passes";
  /* bench fusion's --split wraps cf_opt_check_split in a check of its own */
  if (o->check == cf_opt_check_split || strcmp(v, "SPEC") == 0) return "split";
  if (strstr(v, "DIR")) return "dir";
  if (strstr(v, "FILE")) return strchr(v, '=') ? "namefile" : "file";
  if (strncmp(v, "OUT", 3) == 0) return "file";
  return "none";
}

/* "a|b|c" as "a b c" */
static void words(FILE *f, const char *choices) {
  for (const char *p = choices; *p; p++)
    fputc(*p == '|' ? ' ' : *p, f);
}

static void bash_option_case(FILE *f, const cf_command *c, const cf_opt *o, const char *spelling) {
  const char *kind = value_kind(o);
  if (!kind) return;
  fprintf(f, "    '%s %s') _cf_kind=%s", c->name, spelling, kind);
  char buf[CF_OPT_CHOICES_MAX];
  if (cf_opt_choices(o, buf)) {
    fputs(" _cf_words='", f);
    words(f, cf_opt_choices(o, buf));
    fputc('\'', f);
  }
  fputs(" ;;\n", f);
}

static void bash_completion(FILE *f) {
  fputs("# bash completion for collfuse(1), written by tools/gendocs.c from the\n"
        "# driver's option tables: commands, their options, and the values of\n"
        "# --target, --passes (comma lists), --split, the choices of --algo,\n"
        "# --backend and --device, and file names.\n\n",
        f);
  /* the tables as shell data */
  fputs("_collfuse_commands='", f);
  for (int i = 0, n = 0; cf_commands[i]; i++)
    if (!strchr(cf_commands[i]->name, ' '))
      fprintf(f, "%s%s", n++ ? " " : "", cf_commands[i]->name);
  fputs(" bench'\n_collfuse_benchmarks='", f);
  for (int i = 0; cf_bench_commands[i]; i++)
    fprintf(f, "%s%s", i ? " " : "", cf_bench_commands[i]->name + strlen("bench "));
  fputs("'\n_collfuse_targets='", f);
  for (size_t i = 0; cf_target_name(i); i++)
    fprintf(f, "%s%s", i ? " " : "", cf_target_name(i));
  fputs("'\n_collfuse_passes='", f);
  for (int k = 0; cf_pass_registry[k]; k++)
    fprintf(f, "%s%s", k ? " " : "", cf_pass_registry[k]->name);
  fputs("'\n_collfuse_split='auto bytes: ddp: size: index:'\n\n", f);

  fputs("# _collfuse_options CMD: its options; _collfuse_args CMD: what its\n"
        "# arguments complete to (file or nothing)\n"
        "_collfuse_options() {\n  case $1 in\n",
        f);
  for (int i = 0; cf_commands[i]; i++) {
    const cf_command *c = cf_commands[i];
    fprintf(f, "    '%s') echo '", c->name);
    for (const cf_opt *o = c->opts; o && o->name; o++)
      fprintf(f, "%s%s%s ", o->name, o->alias ? " " : "", o->alias ? o->alias : "");
    fputs("--help' ;;\n", f);
  }
  fputs("  esac\n}\n_collfuse_args() {\n  case $1 in\n", f);
  for (int i = 0; cf_commands[i]; i++)
    if (cf_commands[i]->args && strstr(cf_commands[i]->args, "FILE"))
      fprintf(f, "    '%s') echo file ;;\n", cf_commands[i]->name);
  fputs("  esac\n}\n\n", f);

  fputs("# _collfuse_kind 'CMD OPTION': sets _cf_kind to what the option's value\n"
        "# completes to (empty: a flag) and _cf_words to its choices\n"
        "_collfuse_kind() {\n  _cf_kind= _cf_words=\n  case $1 in\n",
        f);
  for (int i = 0; cf_commands[i]; i++)
    for (const cf_opt *o = cf_commands[i]->opts; o && o->name; o++) {
      bash_option_case(f, cf_commands[i], o, o->name);
      if (o->alias) bash_option_case(f, cf_commands[i], o, o->alias);
    }
  fputs("  esac\n}\n\n", f);

  fputs("# COMP_WORDS split at COMP_WORDBREAKS: '--target=cpu' arrives as '--target'\n"
        "# '=' 'cpu' and 'bytes:25M' as 'bytes' ':' '25M'. _collfuse glues them back\n"
        "# into words, completes the whole current word and hands back the part\n"
        "# after its last break (what bash replaces).\n"
        "_collfuse() {\n"
        "  local -a w=()\n"
        "  local i t cw glue=0\n"
        "  for ((i = 0; i < ${#COMP_WORDS[@]} && i <= COMP_CWORD; i++)); do\n"
        "    t=${COMP_WORDS[i]}\n"
        "    if ((i > 1)) && { [[ $t == [=:] ]] || ((glue)); }; then\n"
        "      w[${#w[@]} - 1]+=$t\n"
        "    else\n"
        "      w+=(\"$t\")\n"
        "    fi\n"
        "    glue=0\n"
        "    [[ $t == [=:] ]] && glue=1\n"
        "  done\n"
        "  cw=$((${#w[@]} - 1))\n"
        "  local cur=${w[cw]} raw=${COMP_WORDS[COMP_CWORD]}\n"
        "  [[ $raw == [=:] ]] && raw=\n"
        "  local cmd=${w[1]} first=2\n"
        "  COMPREPLY=()\n"
        "  if ((cw == 1)); then\n"
        "    COMPREPLY=($(compgen -W \"$_collfuse_commands --help --version\" -- \"$cur\"))\n"
        "    return\n"
        "  fi\n"
        "  if [[ $cmd == bench ]]; then\n"
        "    if ((cw == 2)); then\n"
        "      COMPREPLY=($(compgen -W \"$_collfuse_benchmarks --help\" -- \"$cur\"))\n"
        "      return\n"
        "    fi\n"
        "    cmd=\"bench ${w[2]}\" first=3\n"
        "  fi\n"
        "  [[ -n $(_collfuse_options \"$cmd\") ]] || return\n"
        "  # the option whose value is being typed: the previous word, or\n"
        "  # --opt=VALUE in the current one\n"
        "  local opt= val=$cur\n"
        "  if [[ $cur == -*=* ]]; then\n"
        "    opt=${cur%%=*} val=${cur#*=}\n"
        "  elif ((cw > first)) && [[ ${w[cw - 1]} == -* ]]; then\n"
        "    opt=${w[cw - 1]}\n"
        "  fi\n"
        "  _cf_kind=\n"
        "  [[ -n $opt ]] && _collfuse_kind \"$cmd $opt\"\n"
        "  if [[ -z $_cf_kind ]]; then\n"
        "    opt= val=$cur\n"
        "    if [[ $cur == -* ]]; then\n"
        "      COMPREPLY=($(compgen -W \"$(_collfuse_options \"$cmd\")\" -- \"$cur\"))\n"
        "      return\n"
        "    fi\n"
        "    _cf_kind=$(_collfuse_args \"$cmd\")\n"
        "  fi\n"
        "  case $_cf_kind in\n"
        "    choice) COMPREPLY=($(compgen -W \"$_cf_words\" -- \"$val\")) ;;\n"
        "    target) COMPREPLY=($(compgen -W \"$_collfuse_targets\" -- \"$val\")) ;;\n"
        "    passes)\n"
        "      local done=\n"
        "      [[ $val == *,* ]] && done=${val%,*},\n"
        "      COMPREPLY=($(compgen -P \"$done\" -W \"$_collfuse_passes\" -- \"${val##*,}\")) ;;\n"
        "    split)\n"
        "      COMPREPLY=($(compgen -W \"$_collfuse_split\" -- \"$val\"))\n"
        "      [[ ${#COMPREPLY[@]} == 1 && ${COMPREPLY[0]} == *: ]] && compopt -o nospace "
        "2>/dev/null ;;\n"
        "    file | namefile)\n"
        "      [[ $_cf_kind == namefile && $val == *=* ]] && val=${val#*=}\n"
        "      compopt -o filenames 2>/dev/null\n"
        "      COMPREPLY=($(compgen -f -- \"$val\")) ;;\n"
        "    dir)\n"
        "      compopt -o filenames 2>/dev/null\n"
        "      COMPREPLY=($(compgen -d -- \"$val\")) ;;\n"
        "  esac\n"
        "  # a reply is the whole word (what precedes val, then the candidate)\n"
        "  # less what precedes the part bash replaces\n"
        "  local keep=${cur%\"$val\"} strip=${cur%\"$raw\"}\n"
        "  for i in \"${!COMPREPLY[@]}\"; do\n"
        "    t=$keep${COMPREPLY[i]}\n"
        "    COMPREPLY[i]=${t#\"$strip\"}\n"
        "  done\n"
        "}\n"
        "complete -F _collfuse collfuse\n",
        f);
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "man") != 0 && strcmp(argv[1], "bash") != 0)) {
    fprintf(stderr, "usage: collfuse-gendocs man|bash OUT\n");
    return EXIT_USAGE;
  }
  FILE *f = fopen(argv[2], "w");
  if (!f) {
    fprintf(stderr, "collfuse-gendocs: %s: %s\n", argv[2], strerror(errno));
    return EXIT_RUNTIME;
  }
  if (strcmp(argv[1], "man") == 0)
    man_page(f);
  else
    bash_completion(f);
  if (fclose(f) != 0) {
    fprintf(stderr, "collfuse-gendocs: %s: %s\n", argv[2], strerror(errno));
    remove(argv[2]);
    return EXIT_RUNTIME;
  }
  return 0;
}
