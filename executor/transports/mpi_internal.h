/* transports/mpi_internal.h - what transports/mpi.c (messages, waits,
 * aborts, the world) and transports/mpi_native.c (MPI's own collectives
 * and their watchdog) share. Only these two files include it, and with it
 * mpi.h (STYLE: transports are the only place that includes MPI). */
#ifndef COLLFUSE_TRANSPORTS_MPI_INTERNAL_H
#define COLLFUSE_TRANSPORTS_MPI_INTERNAL_H

#include "transports.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

enum {
  TAG_HDR = 7101,    /* headers (+ inline payloads) */
  TAG_DATA = 7102,   /* payloads that do not fit in the header message, in eager pieces */
  TAG_BULK = 7104,   /* ... sent whole (in 1 GiB parts) */
  TAG_ABORT = 7103,  /* abort reasons */
  TAG_ASK = 7105,    /* "whom do you wait for?" (a timed-out rank asks) */
  TAG_ANSWER = 7106, /* ... and the answer */
  TAG_GROUP = 7200,  /* + a hash of the members (< TAG_GROUPS): MPI_Comm_create_group */
  TAG_GROUPS = 8192,
  GROUP_MAX = 128,   /* group names are at most 127 bytes (SPEC) */
  NODE_MAX = 128,    /* node names in headers (truncated; messages only) */
  MSG_MAX = 1024,    /* abort reasons */
  MAX_PARTS = 16,    /* payload pieces per message */
};
/* A message in flight to one peer: its header's and payload pieces' sends. */
typedef struct send_slot {
  MPI_Request req[1 + MAX_PARTS];
  int nreq;
  char *buf; /* header + inline payload (HDR_CAP(w)) */
} send_slot;

typedef struct peer {
  /* sends to this peer: messages [done, posted) are in flight in slots[i % cap] */
  send_slot *slots;
  uint64_t cap, posted, done;
  /* the next header from this peer lands in rbuf */
  MPI_Request hreq;
  char *rbuf;
} peer;

typedef struct native_group { /* a communicator of this rank's, keyed by its members */
  int *ranks; /* world ranks in group order: the members (of this rank's part) */
  int n;
  MPI_Comm comm;
} native_group;

typedef struct cf_mpi_world cf_mpi_world;
struct cf_mpi_world {
  cf_world base;        /* what callers hold (base.impl is this world) */
  int refs;             /* creates of this process that hold it (mpi.c's joined) */
  cf_comm comm;
  MPI_Comm world;      /* our duplicate of MPI_COMM_WORLD */
  int local_size;      /* ranks on this node */
  bool shm;            /* every rank reaches every other through shared memory */
  size_t inline_max;   /* payloads the header message carries (INLINE_SHM / INLINE_NET) */
  bool multiple;       /* MPI_THREAD_MULTIPLE (else SERIALIZED: lock every call) */
  bool we_initialized; /* we called MPI_Init_thread (and finalize) */
  double timeout_s;
  int spin;                   /* polls before yielding */
  pthread_mutex_t mpi_lock;   /* around MPI calls when !multiple */
  pthread_mutex_t abort_lock; /* abort_req, msg */
  peer *peers;
  MPI_Request abort_req; /* posted receive from any source */
  char abort_in[MSG_MAX];
  MPI_Request *abort_out;
  char abort_text[MSG_MAX]; /* what we sent (must outlive the sends) */
  _Atomic int aborted;
  _Atomic int drained; /* a failing wait gave in-flight sends their chance */
  char msg[MSG_MAX];
  /* who waits for whom, so that a timeout names the rank at the end of
   * the chain of waits (mpi.c, "asking along the chain") */
  _Atomic int waiting_for;    /* the peer this rank's current wait is for; -1: none */
  pthread_mutex_t ask_lock;   /* the fields below */
  MPI_Request ask_req;        /* posted receive of a question from any source */
  int ask_in;                 /* its question number */
  int (*answer)[2];           /* per peer: {question, waiting_for} being sent */
  MPI_Request *answer_out;    /* per peer: that send */
  int *question;              /* per peer: our question being sent */
  MPI_Request *question_out;  /* per peer: that send */
  int questions;              /* numbers our questions */
  native_group *groups;
  int n_groups;
  MPI_Datatype half;               /* 2-byte elements for float16/bfloat16 user ops */
  MPI_Op half_op[2][CF_RED_COUNT]; /* [bf16?][red] */
  char host[MPI_MAX_PROCESSOR_NAME + 1];
  /* the watchdog of native collectives */
  pthread_t dog;
  bool dog_started, dog_stop;
  pthread_mutex_t dog_lock; /* the fields below */
  pthread_cond_t dog_cond;
  double native_deadline; /* 0: no native collective running */
  char native_what[256];  /* which one, for the timeout message */
};

/* mpi_abort.c */
void cf_mpi_lock(cf_mpi_world *w);               /* around MPI calls when only SERIALIZED */
void cf_mpi_unlock(cf_mpi_world *w);
const char *cf_mpi_error_text(int rc, char *buf); /* buf: MPI_MAX_ERROR_STRING bytes */
/* Record an abort reason (first one wins) and send it to every rank. */
void cf_mpi_world_abort(cf_mpi_world *w, const char *text);
/* Has this rank or another aborted? (never blocks) */
bool cf_mpi_poll_abort(cf_mpi_world *w);
/* Abort every rank with text / report the abort; both CF_ERR_RUNTIME. */
cf_status cf_mpi_fail_all(cf_comm *c, const char *text);
cf_status cf_mpi_aborted_error(cf_comm *c);

/* mpi_native.c */
/* The native slot: the whole collective as MPI's own, under the watchdog. */
cf_status cf_mpi_native(cf_comm *c, cf_device *dev, const cf_coll_call *call);
void cf_mpi_native_init(cf_mpi_world *w); /* float16/bfloat16 type and ops, after MPI_Init */
void cf_mpi_native_stop(cf_mpi_world *w); /* end the watchdog thread */
void cf_mpi_native_free(cf_mpi_world *w); /* group communicators, ops, type (before finalize) */
/* The native_groups slot (runtime.h): a communicator for each group not
 * seen before that is not the whole world, made by its ranks (each part of
 * a partitioned group its own). */
cf_status cf_mpi_native_groups(cf_mpi_world *w, const cf_world_group *groups, int n);

#endif
