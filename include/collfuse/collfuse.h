/* collfuse.h - public C API of collfuse, a graph compiler for collective fusion.
 *
 * Conventions (SQLite/LLVM-C style):
 *  - Objects are opaque handles created by cf_<object>_create/load and released
 *    by cf_<object>_destroy, which accepts NULL.
 *  - Every fallible call returns cf_status (CF_OK == 0) and writes its results
 *    through trailing out-parameters, which are set to NULL/0 on failure.
 *  - The message of the last failure is owned by the context and stays valid
 *    until the next call on that context: cf_context_errmsg().
 *  - There is no global state; contexts are independent of each other. One
 *    context and the objects created from it must be used by one thread at a time.
 */
#ifndef COLLFUSE_COLLFUSE_H
#define COLLFUSE_COLLFUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CF_VERSION_MAJOR 0
#define CF_VERSION_MINOR 1
#define CF_VERSION_PATCH 0
#define CF_VERSION_STRING "0.1.0"

typedef enum cf_status {
  CF_OK = 0,
  CF_ERR_INVALID = 1,     /* invalid input: malformed file, failed verification */
  CF_ERR_USAGE = 2,       /* bad argument from the caller */
  CF_ERR_RUNTIME = 3,     /* runtime failure: timeout, rank failure, mismatch */
  CF_ERR_NO_MEMORY = 4,   /* an allocation failed */
  CF_ERR_IO = 5,          /* a file could not be read or written */
  CF_ERR_UNSUPPORTED = 6, /* a feature this build or target does not have */
} cf_status;

typedef enum cf_log_level {
  CF_LOG_ERROR = 0,
  CF_LOG_WARN = 1,
  CF_LOG_INFO = 2,
  CF_LOG_DEBUG = 3,
} cf_log_level;

typedef struct cf_context cf_context; /* error messages, log sink, caches */
typedef struct cf_graph cf_graph;     /* a graph; owns its nodes and strings */

/* Log sink: called with messages the library would otherwise drop (warnings,
 * pass notes). The message is valid only during the call. */
typedef void (*cf_log_fn)(void *user, cf_log_level level, const char *msg);

/* Version of the library actually loaded (may differ from CF_VERSION_*). */
const char *cf_version(void);

cf_status cf_context_create(cf_context **out);
void cf_context_destroy(cf_context *ctx);
/* Message of the last failed call on ctx ("" when none). Owned by ctx. */
const char *cf_context_errmsg(const cf_context *ctx);
void cf_context_set_log(cf_context *ctx, cf_log_fn fn, void *user);

/* Load a graph from a file; the format comes from the extension
 * (.xml native, .graphml). The graph is structurally verified (names, refs,
 * arity, cycles) and its types inferred, but not checked against a target:
 * call cf_graph_verify for that. The graph keeps a pointer to ctx. */
cf_status cf_graph_load(cf_context *ctx, const char *path, cf_graph **out);
/* Parse a graph from memory; name is used in messages and picks the format
 * by extension like cf_graph_load. */
cf_status cf_graph_parse(cf_context *ctx, const char *name, const char *data, size_t size,
                         cf_graph **out);
void cf_graph_destroy(cf_graph *g);

/* Full verification and inference, then the rules of target profile `target`
 * (NULL or "cpu" for the default; see cf_target_name). */
cf_status cf_graph_verify(cf_graph *g, const char *target);

/* Run a comma-separated list of passes ("verify,infer,dce"), or the default
 * pipeline when passes is NULL, or no fusion at all when passes is "" (-O0). */
cf_status cf_graph_run_passes(cf_graph *g, const char *passes);

/* Write the graph as native XML. */
cf_status cf_graph_write_xml(const cf_graph *g, const char *path);
/* Draw the graph; the format comes from the extension: .dot, .svg or .png. */
cf_status cf_graph_write_dot(const cf_graph *g, const char *path);

/* Counts for summaries. */
size_t cf_graph_node_count(const cf_graph *g);
size_t cf_graph_collective_count(const cf_graph *g);

/* Target profiles: index 0.. until NULL. */
const char *cf_target_name(size_t i);

#ifdef __cplusplus
}
#endif
#endif /* COLLFUSE_COLLFUSE_H */
