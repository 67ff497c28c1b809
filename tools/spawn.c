/* spawn.c - `--backend shm --ranks N` without a launcher, and `collfuse
 * launch`: this process starts the job's N processes itself, as torchrun
 * or mpirun would, and waits for them.
 *
 * Each child is one rank: it gets COLLFUSE_RANK, COLLFUSE_WORLD_SIZE and a
 * COLLFUSE_JOB of its own (ir/env.c's table) and goes on with the command
 * as if a launcher had started it (transports/shm_env.c reads them), named
 * collfuse.rR for ps and top (the process name, PR_SET_NAME); it
 * dies with the parent (PR_SET_PDEATHSIG), so a killed `collfuse run`
 * leaves no rank behind. The parent says which rank a signal ended and
 * exits with the first rank's failing exit code, or EXIT_RUNTIME when the
 * only failure was a rank killed.
 */
#define _GNU_SOURCE
#include "tools.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

int cf_tool_spawn_ranks(const char *cmd, int n) {
  unsigned long long salt = 0;
  if (getrandom(&salt, sizeof salt, 0) != (ssize_t)sizeof salt) salt = (unsigned long long)getpid() * 2654435761u;
  char job[64], num[16];
  snprintf(job, sizeof job, "run.%ld.%016llx", (long)getpid(), salt);
  pid_t parent = getpid(), *pid = calloc((size_t)n, sizeof *pid);
  if (!pid) {
    fprintf(stderr, "collfuse %s: out of memory\n", cmd);
    return EXIT_RUNTIME;
  }
  fflush(stdout);
  fflush(stderr);
  int started = 0;
  for (int r = 0; r < n; r++, started++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(EXIT_RUNTIME); /* the parent is already gone */
      snprintf(num, sizeof num, "%d", r);
      setenv(cf_env_table[CF_ENV_SHM_RANK].name, num, 1);
      snprintf(num, sizeof num, "%d", n);
      setenv(cf_env_table[CF_ENV_SHM_SIZE].name, num, 1);
      setenv(cf_env_table[CF_ENV_SHM_JOB].name, job, 1);
      char name[32];
      snprintf(name, sizeof name, "collfuse.r%d", r); /* ps and top name the rank */
      prctl(PR_SET_NAME, name);
      free(pid);
      return -1; /* go on as rank r */
    }
    if (pid[r] < 0) {
      fprintf(stderr, "collfuse %s: cannot start rank %d: %s\n", cmd, r, strerror(errno));
      for (int k = 0; k < r; k++) kill(pid[k], SIGKILL);
      break;
    }
  }
  int rc = started < n ? EXIT_RUNTIME : 0, killed = 0;
  int *code = calloc((size_t)n, sizeof *code);
  for (int left = started; left > 0;) {
    int status;
    pid_t p = waitpid(-1, &status, 0);
    if (p < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = 0;
    while (r < started && pid[r] != p) r++;
    if (r == started) continue;
    left--;
    if (WIFSIGNALED(status)) {
      int sig = WTERMSIG(status);
      fprintf(stderr, "collfuse %s: rank %d (pid %ld) was killed by signal %d (%s)\n", cmd, r,
              (long)p, sig, strsignal(sig));
      killed++;
    } else if (code && WIFEXITED(status)) {
      code[r] = WEXITSTATUS(status);
    }
  }
  for (int r = 0; code && r < started && !rc; r++) rc = code[r];
  if (!rc && killed) rc = EXIT_RUNTIME;
  free(code);
  free(pid);
  return rc;
}
