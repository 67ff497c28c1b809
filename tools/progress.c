/* progress.c - the driver's progress line and phase times.
 *
 * Every command runs with a phase record on its context (ir/progress.c):
 * the library says which phase runs (reading, compiling, planning,
 * generating kernels and inputs, iteration k of K, verifying window w of W)
 * and `run -v` / `--json` read each phase's seconds from it. When standard
 * error is a terminal, a thread of the driver looks at the record four times
 * a second and, once a phase has run for a second, keeps one line on
 * standard error up to date ("collfuse run: verifying, window 17/120, 12.3 s,
 * about 8 s left"), erased when the phase ends; --quiet, or standard error
 * not a terminal (a pipe, a file, a test), shows nothing.
 */
#include "tools.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
  cf_progress *rec;
  pthread_t thread;
  bool started;
  atomic_bool stop, quiet;
  pthread_mutex_t lock; /* the line on the terminal */
  bool shown;           /* a line is on it */
  /* erased for the command's own output: not drawn again while the phase
   * that ran then (name, begun before held_at) still runs */
  const char *held;
  double held_at;
} line = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* What the line calls a phase. */
static const char *label(const char *phase) {
  static const char *const names[][2] = {
      {"read", "reading"},         {"compile", "compiling"},   {"plan", "planning"},
      {"kernels", "kernels"},      {"inputs", "generating inputs"},
      {"iterations", "iteration"}, {"verify", "verifying, window"}, {"save", "saving outputs"},
  };
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (strcmp(names[k][0], phase) == 0) return names[k][1];
  return phase;
}

static void erase_locked(void) {
  if (line.shown) fputs("\r\033[K", stderr);
  line.shown = false;
}

static void *show_main(void *arg) {
  (void)arg;
  while (!atomic_load(&line.stop)) {
    struct timespec ts = {0, 250 * 1000 * 1000};
    nanosleep(&ts, NULL);
    const char *phase;
    double s;
    int64_t done, total;
    bool on = cf_progress_peek(line.rec, &phase, &s, &done, &total);
    pthread_mutex_lock(&line.lock);
    bool held = on && phase == line.held && cf_now() - s <= line.held_at;
    if (!on || held || s < 1.0 || atomic_load(&line.quiet) || atomic_load(&line.stop)) {
      erase_locked();
    } else {
      char text[160], left[48] = "";
      int o = snprintf(text, sizeof text, "collfuse %s: %s", cf_tool_command, label(phase));
      if (total > 0 && o > 0 && (size_t)o < sizeof text)
        o += snprintf(text + o, sizeof text - (size_t)o, " %lld/%lld",
                      (long long)(done < total ? done + 1 : total), (long long)total);
      if (total > 0 && done > 0 && done < total)
        snprintf(left, sizeof left, ", about %.0f s left", s / (double)done * (double)(total - done));
      fprintf(stderr, "\r%s, %.1f s%s\033[K", text, s, left);
      fflush(stderr);
      line.shown = true;
    }
    pthread_mutex_unlock(&line.lock);
  }
  return NULL;
}

cf_status cf_tool_progress_start(cf_context *ctx) {
  cf_status st = cf_progress_create(&line.rec);
  if (st) return st;
  ctx->progress = line.rec;
  if (isatty(STDERR_FILENO)) line.started = pthread_create(&line.thread, NULL, show_main, NULL) == 0;
  return CF_OK;
}

void cf_tool_progress_quiet(void) {
  atomic_store(&line.quiet, true);
  cf_tool_progress_erase();
}

void cf_tool_progress_erase(void) {
  pthread_mutex_lock(&line.lock);
  erase_locked();
  double s;
  int64_t done, total;
  if (line.rec && !cf_progress_peek(line.rec, &line.held, &s, &done, &total)) line.held = NULL;
  line.held_at = cf_now();
  pthread_mutex_unlock(&line.lock);
}

bool cf_opt_check_quiet(void *out, const char *v, char *why, size_t len) {
  (void)out, (void)v, (void)why, (void)len;
  cf_tool_progress_quiet();
  return true;
}

void cf_tool_progress_stop(cf_context *ctx) {
  atomic_store(&line.stop, true);
  if (line.started) pthread_join(line.thread, NULL);
  line.started = false;
  cf_tool_progress_erase();
  ctx->progress = NULL;
  cf_progress_destroy(line.rec);
  line.rec = NULL;
}

int cf_tool_phases(cf_context *ctx, const char **names, double *secs, int max) {
  cf_phase_end(ctx);
  return cf_progress_phases(ctx->progress, names, secs, max);
}
