/* options.c - one table per command drives both its parser and its --help.
 *
 * A command is a row of data (cf_command): its name, its positional
 * arguments, its prose and a table of options (cf_opt: spellings, value
 * name, help text, kind, the field it sets and an optional check).
 * cf_opts_parse walks argv against the table and fills the command's
 * struct; cf_opts_help prints the same table as --help, with the lists the
 * program itself knows (input formats from the frontend's readers, target
 * profiles, passes) where the command takes them. So --help lists exactly
 * what the parser accepts, and a man page or a completion script can walk
 * the same tables (cf_commands).
 */
#include "tools.h"

#include "../executor/algo.h"
#include "../frontend/frontend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HELP_WIDTH = 80, HELP_COLUMN = 22 }; /* option help starts in this column */

static bool is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

static const cf_opt *find_opt(const cf_command *c, const char *name, size_t n) {
  for (const cf_opt *o = c->opts; o && o->name; o++)
    if ((strlen(o->name) == n && strncmp(o->name, name, n) == 0) ||
        (o->alias && strlen(o->alias) == n && strncmp(o->alias, name, n) == 0))
      return o;
  return NULL;
}

static bool has_opt(const cf_command *c, const char *name) {
  return find_opt(c, name, strlen(name)) != NULL;
}

static int unknown_option(const cf_command *c, const char *arg, size_t n) {
  char word[128], dym[160], msg[400];
  snprintf(word, sizeof word, "%.*s", (int)(n < 120 ? n : 120), arg);
  cf_suggest s;
  cf_suggest_init(&s, word);
  for (const cf_opt *o = c->opts; o && o->name; o++) {
    cf_suggest_add(&s, o->name);
    cf_suggest_add(&s, o->alias);
  }
  cf_suggest_add(&s, "--help");
  snprintf(msg, sizeof msg, "unknown option '%s'%s", word,
           cf_did_you_mean(s.best, dym, sizeof dym));
  return cf_tool_usage(c->name, "%s", msg);
}

static bool list_add(cf_opt_list *l, const char *v, int cap) {
  if (!l->v && !(l->v = calloc((size_t)cap + 1, sizeof *l->v))) return false;
  l->v[l->n++] = v;
  return true;
}

/* An empty item of a comma list: leading, trailing or doubled comma. */
static bool has_empty_item(const char *v) {
  size_t n = strlen(v);
  return v[0] == ',' || (n && v[n - 1] == ',') || strstr(v, ",,");
}

/* Store v for option o in out; 0 or the exit code of a usage error. */
static int set_value(const cf_command *c, const cf_opt *o, const char *v, void *out, int cap) {
  char *field = (char *)out + o->field;
  char why[640];
  if (o->comma_list && has_empty_item(v)) {
    snprintf(why, sizeof why, "%s has an empty item in '%s' (separate items with one comma)",
             o->name, v);
    return cf_tool_usage(c->name, "%s", why);
  }
  char buf[CF_OPT_CHOICES_MAX];
  const char *choices = cf_opt_choices(o, buf);
  /* a row with a check of its own decides with it (the choices are what --help lists) */
  if (choices && !o->check && !cf_option_choice(o->name, choices, v, why, sizeof why))
    return cf_tool_usage(c->name, "%s", why);
  switch (o->kind) {
  case CF_OPT_FLAG: break;
  case CF_OPT_STR: *(const char **)field = v; break;
  case CF_OPT_INT: {
    int64_t x;
    if (!cf_option_int(o->name, v, o->lo, o->hi, &x, why, sizeof why))
      return cf_tool_usage(c->name, "%s", why);
    *(int *)field = (int)x;
    break;
  }
  case CF_OPT_SIZE:
    if (!cf_option_size(o->name, v, o->lo, o->hi, (int64_t *)field, why, sizeof why))
      return cf_tool_usage(c->name, "%s", why);
    break;
  case CF_OPT_LIST:
    if (!list_add((cf_opt_list *)field, v, cap)) {
      fprintf(stderr, "collfuse %s: out of memory\n", c->name);
      return EXIT_RUNTIME;
    }
    break;
  case CF_OPT_CALL: break;
  }
  if (o->check && !o->check(out, v, why, sizeof why)) return cf_tool_usage(c->name, "%s", why);
  return 0;
}

int cf_opts_parse(const cf_command *c, int argc, char **argv, void *out) {
  for (int i = 0; i < argc; i++)
    if (is_help(argv[i])) {
      cf_opts_help(c, stdout);
      return CF_OPTS_HELP;
    }
  cf_opt_list *args = c->args ? (cf_opt_list *)((char *)out + c->args_field) : NULL;
  bool only_args = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!only_args && strcmp(a, "--") == 0) {
      only_args = true;
      continue;
    }
    if (only_args || a[0] != '-' || a[1] == 0) { /* "-" is a file: standard input or output */
      if (!args || (c->max_args >= 0 && args->n >= c->max_args))
        return cf_tool_usage(c->name, "unexpected argument '%s'", a);
      if (!list_add(args, a, argc)) {
        fprintf(stderr, "collfuse %s: out of memory\n", c->name);
        return EXIT_RUNTIME;
      }
      continue;
    }
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    const cf_opt *o = find_opt(c, a, n);
    if (!o) return unknown_option(c, a, n);
    if (o->kind == CF_OPT_FLAG) {
      if (eq) return cf_tool_usage(c->name, "%s takes no value", o->name);
      *(bool *)((char *)out + o->field) = true;
      int rc = o->check ? set_value(c, o, "", out, argc) : 0;
      if (rc) return rc;
      continue;
    }
    const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : "";
    if (!*v) return cf_tool_usage(c->name, "%s needs a value", o->name);
    int rc = set_value(c, o, v, out, argc);
    if (rc) return rc;
  }
  if (args && args->n < c->min_args) return cf_tool_usage(c->name, "%s", c->missing);
  return 0;
}

void cf_opts_free(const cf_command *c, void *out) {
  for (const cf_opt *o = c->opts; o && o->name; o++)
    if (o->kind == CF_OPT_LIST) free(((cf_opt_list *)((char *)out + o->field))->v);
  if (c->args) free(((cf_opt_list *)((char *)out + c->args_field))->v);
}

/* ---------------- help ---------------- */

void cf_opts_wrap(FILE *f, const char *text, int col, int indent) {
  for (const char *p = text; *p;) {
    size_t k = strcspn(p, " ");
    if (col > indent && col + 1 + (int)k > HELP_WIDTH) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      fputc(' ', f);
      col++;
    }
    fprintf(f, "%.*s", (int)k, p);
    col += (int)k;
    p += k;
    while (*p == ' ')
      p++;
  }
}

const char *cf_opt_choices(const cf_opt *o, char *buf) {
  return o->choices_of ? o->choices_of(buf, CF_OPT_CHOICES_MAX) : o->choices;
}

static const char *value_name(const cf_opt *o, char *buf) {
  return o->value ? o->value : cf_opt_choices(o, buf);
}

static void synopsis(const cf_command *c, FILE *f) {
  int col = fprintf(f, "usage: collfuse %s", c->name), indent = col + 1;
  char item[160];
  if (c->args) col += fprintf(f, " %s", c->args);
  for (const cf_opt *o = c->opts; o && o->name; o++) {
    char buf[CF_OPT_CHOICES_MAX];
    const char *vn = value_name(o, buf);
    int k = vn ? snprintf(item, sizeof item, "[%s %s]%s", o->name, vn,
                          o->kind == CF_OPT_LIST ? "..." : "")
               : snprintf(item, sizeof item, "[%s]", o->name);
    if (col + 1 + k > HELP_WIDTH) {
      fprintf(f, "\n%*s%s", indent, "", item);
      col = indent + k;
    } else {
      fprintf(f, " %s", item);
      col += 1 + k;
    }
  }
  fputc('\n', f);
}

/* "  -v, --verbose N    help" with the help's '\n' lines aligned. */
static void option_line(FILE *f, const char *names, const char *vn, const char *help) {
  char left[128];
  snprintf(left, sizeof left, "  %s%s%s", names, vn ? " " : "", vn ? vn : "");
  int col = fprintf(f, "%s", left);
  if (col >= HELP_COLUMN) {
    fprintf(f, "\n%*s", HELP_COLUMN, "");
  } else {
    fprintf(f, "%*s", HELP_COLUMN - col, "");
  }
  for (const char *p = help; *p;) {
    size_t k = strcspn(p, "\n");
    fprintf(f, "%.*s\n", (int)k, p);
    p += k;
    if (*p == '\n' && *++p) fprintf(f, "%*s", HELP_COLUMN, "");
  }
}

void cf_opts_help(const cf_command *c, FILE *f) {
  synopsis(c, f);
  if (c->about) fprintf(f, "\n%s", c->about);
  fprintf(f, "\noptions:\n");
  char names[96], buf[CF_OPT_CHOICES_MAX];
  for (const cf_opt *o = c->opts; o && o->name; o++) {
    if (o->alias)
      snprintf(names, sizeof names, "%s, %s", o->name, o->alias);
    else
      snprintf(names, sizeof names, "%s", o->name);
    option_line(f, names, value_name(o, buf), o->help);
  }
  option_line(f, "-h, --help", NULL, "print this help");
  if (c->after) fprintf(f, "\n%s", c->after);
  if (c->reads_graph) {
    char list[512];
    size_t o = (size_t)snprintf(list, sizeof list, "input formats:");
    for (size_t i = 0; cf_format_at(i) && o < sizeof list; i++)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s %s (%s)", i ? "," : "",
                            cf_format_at(i)->ext[0], cf_format_at(i)->name);
    fputc('\n', f);
    cf_opts_wrap(f, list, 0, 2);
    fputc('\n', f);
  }
  if (has_opt(c, "--target")) {
    fprintf(f, "%stargets:", c->reads_graph ? "" : "\n");
    for (size_t i = 0; cf_target_name(i); i++)
      fprintf(f, " %s", cf_target_name(i));
    fprintf(f, "\n");
  }
  if (has_opt(c, "--passes")) {
    fprintf(f, "passes:");
    for (int k = 0; cf_pass_registry[k]; k++)
      fprintf(f, " %s", cf_pass_registry[k]->name);
    fprintf(f, "\n");
  }
}

/* ---------------- checks shared by the commands' tables ---------------- */

/* Each message names the flag, as the C API's name the option ("option
 * target: ..."), around the same parser's words. */
bool cf_opt_check_target(void *out, const char *v, char *why, size_t len) {
  char w[512];
  (void)out;
  if (cf_target_find(v)) return true;
  snprintf(why, len, "--target: %s", cf_target_unknown(v, w, sizeof w));
  return false;
}

const char *cf_opt_algo_choices(char *buf, size_t len) {
  return cf_algo_choices(true, "|", "|", buf, len);
}

const char *cf_opt_algo_choices_own(char *buf, size_t len) {
  return cf_algo_choices(false, "|", "|", buf, len);
}

bool cf_opt_check_algo(void *out, const char *v, char *why, size_t len) {
  cf_algo_req r;
  (void)out;
  return cf_option_algo("--algo", v, true, &r, why, len);
}

bool cf_opt_check_algo_own(void *out, const char *v, char *why, size_t len) {
  cf_algo_req r;
  (void)out;
  return cf_option_algo("--algo", v, false, &r, why, len);
}

bool cf_opt_check_passes(void *out, const char *v, char *why, size_t len) {
  char w[512];
  (void)out;
  if (cf_pass_list_check(v, w, sizeof w, NULL)) return true;
  snprintf(why, len, "--passes: %s", w);
  return false;
}

bool cf_opt_check_split(void *out, const char *v, char *why, size_t len) {
  cf_split sp;
  char w[512];
  (void)out;
  if (cf_split_parse(v, &sp, w, sizeof w)) return true;
  snprintf(why, len, "--split %s", w);
  return false;
}

bool cf_opt_check_cost(void *out, const char *v, char *why, size_t len) {
  cf_cost cm;
  char w[512];
  (void)out;
  if (cf_cost_parse(v, &cm, w, sizeof w)) return true;
  snprintf(why, len, "--cost %s", w);
  return false;
}
