/* main.c - `collfuse COMMAND`: finds the command's row in cf_commands and
 * runs it; `--help` lists the commands, `bench --help` the benchmarks.
 * Everything else of the driver is in the other files of tools/, which
 * tools/gendocs.c links too (the man page and the bash completion).
 */
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void log_to_stderr(void *user, cf_log_level lvl, const char *msg) {
  int verbose = *(int *)user;
  if (lvl <= CF_LOG_WARN || verbose) fprintf(stderr, "collfuse: %s\n", msg);
}

/* "  NAME ARGS   summary" for every command whose name starts with prefix. */
static void command_list(FILE *f, const char *prefix) {
  for (int i = 0; cf_commands[i]; i++) {
    const cf_command *c = cf_commands[i];
    if (strncmp(c->name, prefix, strlen(prefix)) != 0) continue;
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", c->name, c->args ? " " : "", c->args ? c->args : "");
    fprintf(f, "  %-24s %s\n", left, c->summary);
  }
}

static void help_main(FILE *f) {
  char text[1024];
  cf_tool_about(text, sizeof text);
  fprintf(f, "usage: collfuse COMMAND [options]\n\n");
  cf_opts_wrap(f, text, 0, 0);
  fprintf(f, "\n\ncommands:\n");
  command_list(f, "");
  fprintf(f,
          "\n  collfuse --version | --help | COMMAND --help\n\n%s\n"
          "exit codes: 0 ok, 1 invalid input (or an output that cannot be written),\n"
          "2 usage error, 3 runtime failure\n",
          cf_tool_std_note);
}

/* `bench` without a benchmark, or with --help. */
static int bench_usage(const char *name) {
  if (name && (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)) {
    printf("usage: collfuse bench BENCHMARK [options]\n\nbenchmarks:\n");
    command_list(stdout, "bench ");
    printf("\n'collfuse bench BENCHMARK --help' describes one; see bench/README.md.\n");
    return 0;
  }
  char list[256] = "", dym[96];
  size_t o = 0;
  cf_suggest s;
  cf_suggest_init(&s, name);
  for (int i = 0; cf_bench_commands[i]; i++) {
    const char *b = cf_bench_commands[i]->name + strlen("bench ");
    cf_suggest_add(&s, b);
    o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", b);
  }
  if (name)
    fprintf(stderr, "collfuse bench: unknown benchmark '%s'%s\n", name,
            cf_did_you_mean(s.best, dym, sizeof dym));
  else
    fprintf(stderr, "collfuse bench: expected a benchmark name: %s\n", list);
  fprintf(stderr, "Try 'collfuse bench --help'.\n");
  return EXIT_USAGE;
}

/* The command argv names (argv[1], "bench" + argv[2]); NULL after saying why. */
static const cf_command *find_command(int argc, char **argv, int *rc) {
  char name[64];
  bool bench = strcmp(argv[1], "bench") == 0;
  if (bench && argc < 3) {
    *rc = bench_usage(NULL);
    return NULL;
  }
  snprintf(name, sizeof name, bench ? "bench %s" : "%s", argv[bench ? 2 : 1]);
  for (int i = 0; cf_commands[i]; i++)
    if (strcmp(cf_commands[i]->name, name) == 0) return cf_commands[i];
  if (bench) {
    *rc = bench_usage(argv[2]);
    return NULL;
  }
  char dym[96];
  cf_suggest s;
  cf_suggest_init(&s, argv[1]);
  for (int i = 0; cf_commands[i]; i++)
    if (!strchr(cf_commands[i]->name, ' ')) cf_suggest_add(&s, cf_commands[i]->name);
  cf_suggest_add(&s, "bench");
  fprintf(stderr, "collfuse: unknown command '%s'%s\nTry 'collfuse --help'.\n", argv[1],
          cf_did_you_mean(s.best, dym, sizeof dym));
  *rc = EXIT_USAGE;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    help_main(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("collfuse %s\n", cf_version());
    return 0;
  }
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    help_main(stdout);
    return 0;
  }
  int rc = 0;
  const cf_command *c = find_command(argc, argv, &rc);
  if (!c) return rc;
  cf_context *ctx;
  if (cf_context_create(&ctx)) {
    fprintf(stderr, "collfuse: out of memory\n");
    return EXIT_RUNTIME;
  }
  int verbose = cf_env(CF_ENV_VERBOSE) != NULL;
  cf_context_set_log(ctx, log_to_stderr, &verbose);
  cf_tool_command = c->name;
  int skip = strchr(c->name, ' ') ? 3 : 2; /* "bench NAME" takes two words */
  if (cf_tool_progress_start(ctx)) {
    fprintf(stderr, "collfuse: out of memory\n");
    cf_context_destroy(ctx);
    return EXIT_RUNTIME;
  }
  rc = c->run(ctx, argc - skip, argv + skip);
  cf_tool_progress_stop(ctx);
  cf_context_destroy(ctx);
  cf_tool_stdin_free();
  return rc;
}
