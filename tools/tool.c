/* tool.c - what every command of the collfuse driver shares: exit codes
 * from statuses, how failures and usage errors are printed, loading a graph
 * (standard input read once), the Opaque-op warnings, and the driver's
 * description for --help and the man page. The commands (collfuse.c,
 * run.c, ranktable.c, bench*.c) and options.c call it; it calls none of them.
 */
#include "tools.h"

#include "../frontend/frontend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cf_tool_exit_code(cf_status st) {
  switch (st) {
  case CF_OK: return 0;
  case CF_ERR_USAGE: return EXIT_USAGE;
  case CF_ERR_RUNTIME:
  case CF_ERR_NO_MEMORY: return EXIT_RUNTIME;
  default: return EXIT_INVALID;
  }
}

const char *cf_tool_command = "";

int cf_tool_fail(cf_context *ctx, cf_status st) {
  const char *msg = cf_context_errmsg(ctx);
  cf_tool_progress_erase();
  bool no_file = strncmp(msg, "error: ", 7) == 0;
  if (st == CF_ERR_USAGE) {
    /* "FILE: error: MSG" -> "collfuse CMD: FILE: MSG", "error: MSG" -> "collfuse CMD: MSG" */
    const char *e = no_file ? msg : strstr(msg, ": error: ");
    int keep = no_file || !e ? 0 : (int)(e - msg) + 2;
    const char *rest = no_file ? msg + 7 : e ? e + 9 : msg;
    fprintf(stderr, "collfuse %s: %.*s%s\nTry 'collfuse %s --help'.\n", cf_tool_command, keep, msg,
            rest, cf_tool_command);
  } else if (no_file) {
    fprintf(stderr, "collfuse %s: %s\n", cf_tool_command, msg);
  } else {
    fprintf(stderr, "%s\n", msg);
  }
  return cf_tool_exit_code(st);
}

int cf_tool_usage(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "collfuse %s: ", cmd);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'collfuse %s --help'.\n", cmd);
  return EXIT_USAGE;
}

/* Standard input, read once */
static struct {
  char *data;
  size_t size;
  bool read;
} stdin_graph;

cf_status cf_tool_load(cf_context *ctx, const char *path, cf_graph **out) {
  if (!cf_tool_is_std(path)) return cf_graph_load(ctx, path, out);
  *out = NULL;
  if (!stdin_graph.read) {
    cf_status st = cf_read_file(ctx, "-", NULL, CF_MAX_FILE_BYTES, CF_IN_STDIN, &stdin_graph.data,
                                &stdin_graph.size);
    if (st) return st;
    stdin_graph.read = true;
  }
  return cf_graph_parse(ctx, CF_STDIN_NAME, stdin_graph.data, stdin_graph.size, out);
}

int cf_tool_opaque(const cf_graph *g, bool strict) {
  for (int i = 0; i < g->n_opaque; i++) {
    char text[512], at[32] = "";
    if (g->opaque[i].line) snprintf(at, sizeof at, ":%d", g->opaque[i].line);
    fprintf(stderr, "%s%s: %s: %s\n", g->file, at, strict ? "error" : "warning",
            cf_opaque_text(&g->opaque[i], text, sizeof text));
  }
  return strict && g->n_opaque ? EXIT_INVALID : 0;
}

void cf_tool_stdin_free(void) {
  free(stdin_graph.data);
  stdin_graph.data = NULL;
}

bool cf_tool_is_std(const char *path) { return path && strcmp(path, "-") == 0; }

const char *cf_tool_name(const char *path) { return cf_tool_is_std(path) ? CF_STDIN_NAME : path; }

/* The paragraph under `collfuse --help`'s usage line and the man page's
 * DESCRIPTION: what collfuse does, with the formats its readers take. */
void cf_tool_about(char *text, size_t len) {
  size_t o = (size_t)snprintf(
      text, len, "collfuse compiles graphs with collective operations: it reads them (");
  for (size_t i = 0; cf_format_at(i) && o < len; i++)
    o += (size_t)snprintf(text + o, len - o, "%s%s (%s)", i ? ", " : "", cf_format_at(i)->name,
                          cf_format_at(i)->ext[0]);
  if (o < len)
    snprintf(text + o, len - o,
             "), verifies them against a target profile, runs passes, executes "
             "them on ranks and draws them.");
}

const char cf_tool_std_note[] =
    "A FILE of '-' is standard input (the format is told from how it starts: <graph>,\n"
    "<graphml>, HloModule, module, node {); an output of '-' is standard output.\n";
