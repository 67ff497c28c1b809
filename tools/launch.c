/* launch.c - `collfuse launch --ranks N [--] PROGRAM [ARGS...]`: collfuse's
 * own launcher for programs, as torchrun or mpirun on one host.
 *
 * It starts N processes of PROGRAM, each one rank of a job on the shm
 * world: spawn.c gives each COLLFUSE_RANK, COLLFUSE_WORLD_SIZE and a
 * COLLFUSE_JOB of its own, as for `run --backend shm --ranks N`, and the
 * program joins through the library (the C API's backend "shm", Python's
 * collfuse.distributed.init() and collfuse.torch.compile_step). Everything
 * from PROGRAM on is the program's: its options, --help included, are not
 * collfuse's. The exit code is the first failing rank's, as for run.
 */
#include "tools.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct launch_args {
  cf_opt_list program; /* PROGRAM [ARGS...]: filled here, never by the parser */
  int ranks;
} launch_args;

static const cf_opt launch_opts[] = {
    {"--ranks", NULL, "N", CF_OPT_INT, offsetof(launch_args, ranks), 1, CF_MAX_WORLD,
     .help = "processes to start, ranks 0..N-1 of one job (default 1)"},
    {0},
};

static int cmd_launch(cf_context *ctx, int argc, char **argv);

const cf_command cf_command_launch = {
    .name = "launch",
    .args = "PROGRAM [ARGS...]",
    .min_args = 0,
    .max_args = -1,
    .args_field = offsetof(launch_args, program),
    .summary = "start N processes of a program as the ranks of one job",
    .about = "Start N processes of PROGRAM (found on PATH) with ARGS, on this host, each\n"
             "one rank of a job on collfuse's shared-memory world, as torchrun or mpirun\n"
             "would: COLLFUSE_RANK, COLLFUSE_WORLD_SIZE and COLLFUSE_JOB tell each its\n"
             "rank, and the library joins the job from them (Python's\n"
             "collfuse.distributed.init() and collfuse.torch.compile_step, a C program\n"
             "with the option backend=shm). The arguments from PROGRAM on (put '--'\n"
             "before a PROGRAM that starts with '-') are the program's own.\n",
    .opts = launch_opts,
    .after = "Waits for every rank; exits with the first failing rank's exit code, 3\n"
             "when a rank was killed by a signal (named on stderr), 1 when PROGRAM\n"
             "cannot be run. A killed `collfuse launch` takes its ranks with it.\n",
    .run = cmd_launch,
};

/* Where PROGRAM starts in argv: after "--", or the first argument that is
 * neither an option of ours nor an option's value; argc when none. *cut: how
 * many arguments before it are ours. */
static int program_start(int argc, char **argv, int *cut) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      *cut = i;
      return i + 1;
    }
    if (a[0] != '-' || a[1] == 0) {
      *cut = i;
      return i;
    }
    for (const cf_opt *o = launch_opts; o->name; o++)
      if (o->kind != CF_OPT_FLAG && (strcmp(a, o->name) == 0 || (o->alias && strcmp(a, o->alias) == 0)))
        i++; /* its value follows */
  }
  *cut = argc;
  return argc;
}

static int cmd_launch(cf_context *ctx, int argc, char **argv) {
  (void)ctx;
  launch_args a = {0};
  int cut, start = program_start(argc, argv, &cut);
  int rc = cf_opts_parse(&cf_command_launch, cut, argv, &a);
  int ranks = a.ranks ? a.ranks : 1;
  cf_opts_free(&cf_command_launch, &a);
  if (rc) return rc == CF_OPTS_HELP ? 0 : rc;
  if (start >= argc) return cf_tool_usage("launch", "%s", "no program to start");
  rc = cf_tool_spawn_ranks("launch", ranks);
  if (rc != -1) return rc;
  char **program = argv + start; /* main's argv ends with NULL */
  execvp(program[0], program);
  fprintf(stderr, "collfuse launch: cannot run '%s': %s\n", program[0], strerror(errno));
  fflush(stderr);
  _exit(EXIT_INVALID);
}
