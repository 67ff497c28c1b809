/* transports/mpi_abort.c - what the MPI transport's messages (mpi.c) and
 * its native collectives (mpi_native.c) share: the lock around MPI calls
 * under MPI_THREAD_SERIALIZED, MPI's error strings, and the abort protocol.
 *
 * abort() records the first reason and sends it to every rank on its own
 * tag, where a receive from any source is always posted, so all ranks stop
 * with the same message; every wait polls for it. Before a failing wait
 * returns, the sends in flight get a moment to finish (drain), since a
 * peer may be reading this process's memory in place.
 */
#define _GNU_SOURCE
#include "mpi_internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

void cf_mpi_lock(cf_mpi_world *w) {
  if (!w->multiple) pthread_mutex_lock(&w->mpi_lock);
}

void cf_mpi_unlock(cf_mpi_world *w) {
  if (!w->multiple) pthread_mutex_unlock(&w->mpi_lock);
}

const char *cf_mpi_error_text(int rc, char *buf) {
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
    snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
  return buf;
}

/* ---------------- abort ---------------- */

/* Record reason (first one wins) and tell every other rank. A reason
 * that is a context's formatted message ("error: M", "FILE: error: M")
 * loses its "error: ": every rank formats it again when it stops. */
void cf_mpi_world_abort(cf_mpi_world *w, const char *text) {
  pthread_mutex_lock(&w->abort_lock);
  if (atomic_load(&w->aborted)) {
    pthread_mutex_unlock(&w->abort_lock);
    return;
  }
  const char *e = strncmp(text, "error: ", 7) == 0 ? text : strstr(text, ": error: ");
  if (e == text)
    snprintf(w->msg, sizeof w->msg, "%s", text + 7);
  else if (e)
    snprintf(w->msg, sizeof w->msg, "%.*s: %s", (int)(e - text), text, e + 9);
  else
    snprintf(w->msg, sizeof w->msg, "%s", text);
  snprintf(w->abort_text, sizeof w->abort_text, "%s", w->msg);
  atomic_store(&w->aborted, 1);
  pthread_mutex_unlock(&w->abort_lock);
  /* under SERIALIZED the other thread may hold mpi_lock in a blocking
   * native collective: then the flag alone has to do */
  if (!w->multiple && pthread_mutex_trylock(&w->mpi_lock) != 0) return;
  int len = (int)strlen(w->abort_text) + 1;
  for (int r = 0; r < w->comm.size; r++)
    if (r != w->comm.rank)
      MPI_Isend(w->abort_text, len, MPI_CHAR, r, TAG_ABORT, w->world, &w->abort_out[r]);
  if (!w->multiple) pthread_mutex_unlock(&w->mpi_lock);
}

/* Has a reason arrived from another rank? (never blocks) */
bool cf_mpi_poll_abort(cf_mpi_world *w) {
  if (atomic_load(&w->aborted)) return true;
  if (pthread_mutex_trylock(&w->abort_lock) != 0) return false; /* the other thread is testing */
  int done = 0;
  if (w->abort_req != MPI_REQUEST_NULL &&
      (w->multiple || pthread_mutex_trylock(&w->mpi_lock) == 0)) {
    MPI_Test(&w->abort_req, &done, MPI_STATUS_IGNORE);
    if (!w->multiple) pthread_mutex_unlock(&w->mpi_lock);
  }
  if (done && !atomic_load(&w->aborted)) {
    w->abort_in[sizeof w->abort_in - 1] = 0;
    snprintf(w->msg, sizeof w->msg, "%s", w->abort_in);
    atomic_store(&w->aborted, 1);
  }
  pthread_mutex_unlock(&w->abort_lock);
  return atomic_load(&w->aborted);
}

/* Before a failing wait returns (and the run frees its buffers), let the
 * sends in flight finish for a moment: a peer that has matched one may be
 * copying out of this process's memory (shared memory's single copy reads
 * it in place), and freeing it under the copy would crash that peer. Sends
 * no peer will receive any more are given up after the moment. Once. */
static void drain(cf_comm *c) {
  cf_mpi_world *w = c->impl;
  if (atomic_exchange(&w->drained, 1)) return;
  double end = cf_now() + (w->timeout_s < 2 ? w->timeout_s / 2 : 1.0);
  for (int r = 0; r < c->size; r++) {
    peer *p = &w->peers[r];
    for (uint64_t i = p->done; i < p->posted; i++) {
      send_slot *s = &p->slots[i % p->cap];
      int done = 0;
      while (!done && cf_now() < end) {
        cf_mpi_lock(w);
        int rc = MPI_Testall(s->nreq, s->req, &done, MPI_STATUSES_IGNORE);
        cf_mpi_unlock(w);
        if (rc != MPI_SUCCESS) return;
        if (!done) sched_yield();
      }
      if (!done) return;
    }
  }
}

cf_status cf_mpi_aborted_error(cf_comm *c) {
  cf_mpi_world *w = c->impl;
  drain(c);
  return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s",
                  w->msg); /* msg is final once the flag is set */
}

/* Fail every rank with text; the caller's error. */
cf_status cf_mpi_fail_all(cf_comm *c, const char *text) {
  cf_mpi_world_abort(c->impl, text);
  drain(c);
  return cf_error(c->ctx, CF_ERR_RUNTIME, NULL, 0, "%s", text);
}
