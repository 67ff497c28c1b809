/* prototext.h - protobuf text format without a schema, between prototext.c
 * (the parser) and pbtxt.c (the GraphDef reader that reads its fields).
 *
 * Protobuf text needs no schema to be parsed: a field is `name: scalar`,
 * `name { ... }`, `name < ... >` or `name: [ ... ]`. The parser turns the
 * text into a tree of fields; scalars stay the input's tokens until a reader
 * asks for a string, an integer or a number. Private to frontend/.
 */
#ifndef COLLFUSE_PROTOTEXT_H
#define COLLFUSE_PROTOTEXT_H

#include "frontend.h"

/* One field of a protobuf text message. */
typedef struct pf {
  cf_span name;
  int line;
  bool msg;         /* a message (child holds its fields), else a scalar */
  cf_span text;     /* scalar: the token, or adjacent quoted strings */
  struct pf *child; /* message fields, in order */
  struct pf *next;
} pf;

/* Where the parser's errors go and what it allocates from; the GraphDef
 * reader shares it, so both report through one context and one flag. */
typedef struct pb_text {
  cf_context *ctx;
  const char *file; /* for messages */
  cf_arena scratch; /* fields and decoded strings; the owner frees it */
  const char *end;  /* end of the text being parsed */
  bool oom;         /* an allocation failed: every error reads "out of memory" */
} pb_text;

/* Parse text[0..size) (NUL-terminated at size; fields point into it, so it
 * must outlive them) into root's fields. Errors read "FILE:LINE: error: ...". */
cf_status cf_pb_parse(pb_text *t, const char *text, size_t size, pf *root);
/* The first field of message m called name, NULL when none (or m is NULL). */
const pf *cf_pb_get(const pf *m, const char *name);
/* The next field after f called name, NULL when none. */
const pf *cf_pb_next(const pf *f, const char *name);
/* Decode a scalar's quoted string(s), C escapes included, into the arena
 * (NUL-terminated; *len may count NULs inside). */
cf_status cf_pb_string(pb_text *t, const pf *f, char **out, size_t *len);
/* A string field used as a name (node, op, group, input): printable ASCII,
 * as TensorFlow's names are, so it is safe in messages and in written XML. */
cf_status cf_pb_name(pb_text *t, const pf *f, const char **out);
/* A whole string as an int64 (strtoll base 0); false otherwise. */
bool cf_pb_i64(const char *s, int64_t *out);
/* An integer scalar, or a string holding one ("8": GE writes rank_size so);
 * false otherwise (no error is left in the context). */
bool cf_pb_int(pb_text *t, const pf *f, int64_t *out);
/* A number scalar ("1.5", "1.5f", "inf"); false otherwise. */
bool cf_pb_double(const pf *f, double *out);

#endif /* COLLFUSE_PROTOTEXT_H */
