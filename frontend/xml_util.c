/* xml_util.c - hardened libxml2 parsing shared by the native XML and GraphML
 * readers.
 *
 * Graph files come from other tools and other people, so the parser gets no
 * network (XML_PARSE_NONET), loads no DTD, and substitutes no entities. A
 * document that declares a DOCTYPE is refused before libxml2 sees it: that
 * closes XXE and billion-laughs at the door instead of relying on libxml2's
 * amplification heuristics. Element counts are capped after parsing.
 */
#include "frontend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/SAX2.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

static int line_at(const char *data, size_t off) {
  int line = 1;
  for (size_t i = 0; i < off; i++) line += data[i] == '\n';
  return line;
}

static const char *find_mem(const char *hay, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (hay[i] == needle[0] && memcmp(hay + i, needle, k) == 0) return hay + i;
  return NULL;
}

static size_t count_elements(xmlNodePtr n, size_t limit) {
  size_t c = 0;
  /* iterative walk: deep documents must not overflow our stack */
  xmlNodePtr cur = n;
  while (cur) {
    if (cur->type == XML_ELEMENT_NODE && ++c > limit) return c;
    if (cur->children && cur->type == XML_ELEMENT_NODE) {
      cur = cur->children;
      continue;
    }
    while (cur && !cur->next && cur != n) cur = cur->parent;
    if (!cur || cur == n) break;
    cur = cur->next;
  }
  return c;
}

/* Count start tags with a byte scan (comments, CDATA sections and processing
 * instructions skipped; '<' appears nowhere else in well-formed XML) so an
 * oversized document is refused before libxml2 builds a tree for it. Returns
 * the offset of the first start tag over the limit, or size. */
static size_t scan_elements(const char *d, size_t n, size_t limit) {
  size_t c = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    if (d[i] != '<') continue;
    const char *rest = d + i + 1, *close = NULL;
    size_t left = n - i - 1;
    if (left >= 3 && memcmp(rest, "!--", 3) == 0)
      close = "-->";
    else if (left >= 8 && memcmp(rest, "![CDATA[", 8) == 0)
      close = "]]>";
    else if (rest[0] == '?')
      close = "?>";
    if (close) {
      const char *e = find_mem(rest, left, close);
      if (!e) return n;
      i = (size_t)(e - d);
      continue;
    }
    unsigned char ch = (unsigned char)rest[0];
    bool name_start = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
                      ch == ':' || ch >= 0x80;
    if (name_start && ++c > limit) return i;
  }
  return n;
}

/* SAX hooks, so that what the byte scan below cannot see (a DOCTYPE in a
 * UTF-16 document) and the element cap are enforced while parsing: the parser
 * stops at the DOCTYPE before any entity is declared, and at the first element
 * over the cap instead of building the whole tree first. */
typedef struct parse_guard {
  int doctype_line;   /* > 0: a DOCTYPE was seen there */
  int elements_line;  /* > 0: the element over the cap starts there */
  size_t elements;
} parse_guard;

static int guard_line(xmlParserCtxtPtr pc) {
  int line = pc->input ? pc->input->line : 0;
  return line > 0 ? line : 1;
}

static void guard_internal_subset(void *user, const xmlChar *nm, const xmlChar *eid,
                                  const xmlChar *sid) {
  xmlParserCtxtPtr pc = user;
  parse_guard *gd = pc->_private;
  (void)nm, (void)eid, (void)sid;
  if (!gd->doctype_line) gd->doctype_line = guard_line(pc);
  xmlStopParser(pc);
}

static void guard_start_element(void *user, const xmlChar *local, const xmlChar *prefix,
                                const xmlChar *uri, int nb_ns, const xmlChar **ns, int nb_attr,
                                int nb_def, const xmlChar **attrs) {
  xmlParserCtxtPtr pc = user;
  parse_guard *gd = pc->_private;
  if (++gd->elements > CF_MAX_XML_ELEMENTS) {
    if (!gd->elements_line) gd->elements_line = guard_line(pc);
    xmlStopParser(pc);
    return;
  }
  xmlSAX2StartElementNs(user, local, prefix, uri, nb_ns, ns, nb_attr, nb_def, attrs);
}

/* libxml2's generic error handler, for the calling thread while it parses:
 * drops what libxml2 would print on stderr even with XML_PARSE_NOERROR (an
 * input encoding that fails to convert, "I/O error : encoder error"); the
 * parser's own error, which names the line, is the one reported. */
static void drop_message(void *user, const char *msg, ...) { (void)user, (void)msg; }

cf_status cf_xml_parse(cf_context *ctx, const char *name, const char *data, size_t size,
                       struct _xmlDoc **out) {
  *out = NULL;
  if (size > CF_MAX_FILE_BYTES)
    return cf_error(ctx, CF_ERR_INVALID, name, 0, "file is %zu bytes, above the limit of %zu", size,
                    CF_MAX_FILE_BYTES);
  if (size > INT32_MAX) return cf_error(ctx, CF_ERR_INVALID, name, 0, "file too large");
  const char *bad;
  if ((bad = find_mem(data, size, "<!DOCTYPE")) || (bad = find_mem(data, size, "<!ENTITY")))
    return cf_error(ctx, CF_ERR_INVALID, name, line_at(data, (size_t)(bad - data)),
                    "DOCTYPE and entity declarations are not allowed (external entities and "
                    "entity expansion are refused)");
  size_t over = scan_elements(data, size, CF_MAX_XML_ELEMENTS);
  if (over < size)
    return cf_error(ctx, CF_ERR_INVALID, name, line_at(data, over), "more than %d XML elements",
                    CF_MAX_XML_ELEMENTS);
  xmlInitParser();
  xmlParserCtxtPtr pc = xmlNewParserCtxt();
  if (!pc) return cf_error(ctx, CF_ERR_NO_MEMORY, name, 0, "out of memory");
  parse_guard gd = {0};
  pc->_private = &gd;
  pc->sax->internalSubset = guard_internal_subset;
  pc->sax->startElementNs = guard_start_element;
  int opts = XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA |
             XML_PARSE_BIG_LINES;
  xmlGenericErrorFunc old_fn = xmlGenericError; /* per thread in libxml2 */
  void *old_user = xmlGenericErrorContext;
  xmlSetGenericErrorFunc(NULL, drop_message);
  xmlDocPtr doc = xmlCtxtReadMemory(pc, data, (int)size, name, NULL, opts);
  xmlSetGenericErrorFunc(old_user, old_fn);
  if (gd.doctype_line || gd.elements_line) {
    if (doc) xmlFreeDoc(doc);
    xmlFreeParserCtxt(pc);
    if (gd.doctype_line)
      return cf_error(ctx, CF_ERR_INVALID, name, gd.doctype_line,
                      "DOCTYPE and entity declarations are not allowed (external entities and "
                      "entity expansion are refused)");
    return cf_error(ctx, CF_ERR_INVALID, name, gd.elements_line, "more than %d XML elements",
                    CF_MAX_XML_ELEMENTS);
  }
  if (!doc || !pc->wellFormed) {
    const xmlError *e = xmlCtxtGetLastError(pc);
    char msg[512] = "malformed XML";
    int line = 0;
    if (e && e->message) {
      snprintf(msg, sizeof msg, "malformed XML: %s", e->message);
      cf_xml_message_line(msg);
      line = e->line;
    }
    if (doc) xmlFreeDoc(doc);
    xmlFreeParserCtxt(pc);
    return cf_error(ctx, CF_ERR_INVALID, name, line, "%s", msg);
  }
  xmlFreeParserCtxt(pc);
  if (doc->intSubset || doc->extSubset) {
    xmlFreeDoc(doc);
    return cf_error(ctx, CF_ERR_INVALID, name, 0, "DOCTYPE declarations are not allowed");
  }
  xmlNodePtr root = xmlDocGetRootElement(doc);
  if (!root) {
    xmlFreeDoc(doc);
    return cf_error(ctx, CF_ERR_INVALID, name, 0, "empty document");
  }
  if (count_elements(root, CF_MAX_XML_ELEMENTS) > CF_MAX_XML_ELEMENTS) {
    xmlFreeDoc(doc);
    return cf_error(ctx, CF_ERR_INVALID, name, 0, "more than %d XML elements",
                    CF_MAX_XML_ELEMENTS);
  }
  *out = doc;
  return CF_OK;
}

void cf_xml_message_line(char *msg) {
  char *o = msg;
  for (const char *p = msg; *p; p++) {
    bool space = *p == '\n' || *p == '\r' || *p == '\t' || *p == ' ';
    if (space && (o == msg || o[-1] == ' ')) continue;
    *o++ = space ? ' ' : *p;
  }
  while (o > msg && o[-1] == ' ')
    o--;
  *o = 0;
}

void cf_xml_free(struct _xmlDoc *doc) {
  if (doc) xmlFreeDoc(doc);
}

int cf_xml_line(const struct _xmlNode *n) { return n ? (int)xmlGetLineNo(n) : 0; }

bool cf_parse_int_list(const char *s, int **out, int *n, char *why, size_t why_len) {
  *out = NULL;
  *n = 0;
  int cap = 0;
  const char *p = s;
  while (*p == ' ') p++;
  if (!*p) return true;
  for (;;) {
    while (*p == ' ') p++;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno == ERANGE || v < 0 || v > CF_MAX_WORLD) {
      snprintf(why, why_len, "bad rank list '%s': expected integers in 0..%d", CF_QUOTE(s),
               CF_MAX_WORLD);
      free(*out);
      *out = NULL;
      return false;
    }
    if (*n == cap) {
      if (cap >= CF_MAX_WORLD) {
        snprintf(why, why_len, "rank list longer than %d", CF_MAX_WORLD);
        free(*out);
        *out = NULL;
        return false;
      }
      cap = cap ? cap * 2 : 8;
      int *nv = realloc(*out, (size_t)cap * sizeof(int));
      if (!nv) {
        snprintf(why, why_len, "out of memory");
        free(*out);
        *out = NULL;
        return false;
      }
      *out = nv;
    }
    (*out)[(*n)++] = (int)v;
    p = end;
    while (*p == ' ') p++;
    if (!*p) return true;
    if (*p != ',') {
      snprintf(why, why_len, "bad rank list '%s': unexpected '%s'", CF_QUOTE(s),
               CF_QUOTE(((char[2]){*p, 0})));
      free(*out);
      *out = NULL;
      return false;
    }
    p++;
  }
}
