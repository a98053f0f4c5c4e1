/*
 * s3/xml.c — the XML replies of S3 (see s3/parse.h), read with expat: ListObjectsV2 pages and
 * error documents. One event handler follows the element path; the text of the few elements read
 * is gathered into bounded buffers (a key longer than S3's limit is a defect, a long message is
 * cut). No DOCTYPE is accepted, so no entity of the document's own can expand; the depth, the body
 * size and the number of objects are bounded before anything grows.
 */
#include "s3/parse.h"

#include "base/util.h"

#include <expat.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 16
/* Longest text kept of an element that is not a key (sizes, flags, ETags, tokens). */
#define FIELD_MAX 4096

typedef enum field {
  F_NONE = 0,
  F_KEY,
  F_SIZE,
  F_ETAG,
  F_TRUNCATED,
  F_TOKEN,
  F_CODE,
  F_MESSAGE,
  F_REGION
} field;

typedef struct doc {
  XML_Parser p;
  bool list; /* a ListObjectsV2 page (else an error document) */
  int depth;
  const char *root; /* the expected root element */
  bool root_seen;
  char *defect; /* why the document was refused (static text), NULL while fine */
  /* the element whose text is gathered */
  field in;
  sl__buf text;
  /* a page: objects so far, the one being read */
  sl__vec objects; /* sl__s3_object */
  bool in_contents;
  sl__s3_object cur;
  bool have_key, have_size;
  sl__s3_page *page;
  sl__s3_error_doc *error;
} doc;

static void refuse(doc *d, const char *why) {
  if (d->defect == NULL)
    d->defect = (char *)why;
  XML_StopParser(d->p, XML_FALSE);
}

static field field_of(const doc *d, const char *name) {
  if (d->list && d->depth == 3 && d->in_contents) {
    if (strcmp(name, "Key") == 0)
      return F_KEY;
    if (strcmp(name, "Size") == 0)
      return F_SIZE;
    if (strcmp(name, "ETag") == 0)
      return F_ETAG;
  } else if (d->list && d->depth == 2) {
    if (strcmp(name, "IsTruncated") == 0)
      return F_TRUNCATED;
    if (strcmp(name, "NextContinuationToken") == 0)
      return F_TOKEN;
  } else if (!d->list && d->depth == 2) {
    if (strcmp(name, "Code") == 0)
      return F_CODE;
    if (strcmp(name, "Message") == 0)
      return F_MESSAGE;
    if (strcmp(name, "Region") == 0)
      return F_REGION;
  }
  return F_NONE;
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs) {
  (void)attrs;
  doc *d = ud;
  if (d->defect != NULL) /* expat may call a handler or two after a stop */
    return;
  if (++d->depth > MAX_DEPTH) {
    refuse(d, "nested too deeply");
    return;
  }
  if (d->depth == 1) {
    if (strcmp(name, d->root) != 0)
      refuse(d, d->list ? "the root element is not ListBucketResult" : "the root element is not Error");
    d->root_seen = true;
    return;
  }
  if (d->in != F_NONE) {
    refuse(d, "an element inside a text field");
    return;
  }
  if (d->list && d->depth == 2 && strcmp(name, "Contents") == 0) {
    if (d->objects.len >= SL_S3_PAGE_MAX_KEYS) {
      refuse(d, "more objects than a page may hold");
      return;
    }
    d->in_contents = true;
    memset(&d->cur, 0, sizeof d->cur);
    d->have_key = d->have_size = false;
    return;
  }
  d->in = field_of(d, name);
  sl__buf_free(&d->text);
  sl__buf_init(&d->text, d->in == F_KEY ? SL_S3_KEY_MAX : FIELD_MAX);
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len) {
  doc *d = ud;
  if (d->defect != NULL || d->in == F_NONE || len <= 0)
    return;
  size_t room = d->text.max - d->text.len;
  size_t n = (size_t)len;
  if (n > room && (d->in == F_MESSAGE || d->in == F_CODE || d->in == F_REGION))
    n = room; /* an error's texts are only shown: cut */
  if (n > room || !sl__buf_append(&d->text, s, n))
    refuse(d, d->in == F_KEY ? "a key longer than 1024 bytes" : "a field too long");
}

static void copy_cut(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src);
}

/* The end of a text field: its value where it belongs. */
static void field_end(doc *d) {
  const char *t = sl__buf_str(&d->text);
  switch (d->in) {
  case F_KEY:
    free(d->cur.key);
    d->cur.key = t[0] != '\0' ? sl__strdup(t) : NULL;
    d->have_key = d->cur.key != NULL;
    if (!d->have_key)
      refuse(d, t[0] == '\0' ? "an empty key" : "out of memory");
    break;
  case F_SIZE:
    d->have_size = sl__parse_u64(t, &d->cur.size);
    if (!d->have_size)
      refuse(d, "a size that is not a decimal number");
    break;
  case F_ETAG:
    free(d->cur.etag);
    d->cur.etag = t[0] != '\0' ? sl__strdup(t) : NULL; /* empty: the object is not pinned */
    if (d->cur.etag == NULL && t[0] != '\0')
      refuse(d, "out of memory");
    break;
  case F_TRUNCATED:
    if (strcmp(t, "true") != 0 && strcmp(t, "false") != 0)
      refuse(d, "IsTruncated is neither true nor false");
    d->page->truncated = strcmp(t, "true") == 0;
    break;
  case F_TOKEN:
    free(d->page->next_token);
    d->page->next_token = t[0] != '\0' ? sl__strdup(t) : NULL;
    break;
  case F_CODE:
    copy_cut(d->error->code, sizeof d->error->code, t);
    break;
  case F_MESSAGE:
    copy_cut(d->error->message, sizeof d->error->message, t);
    break;
  case F_REGION:
    copy_cut(d->error->region, sizeof d->error->region, t);
    break;
  case F_NONE:
    break;
  }
  d->in = F_NONE;
}

static void free_object(sl__s3_object *o) {
  free(o->key);
  free(o->etag);
  memset(o, 0, sizeof *o);
}

static void XMLCALL on_end(void *ud, const XML_Char *name) {
  doc *d = ud;
  if (d->defect != NULL)
    return;
  if (d->in != F_NONE) {
    field_end(d);
  } else if (d->list && d->in_contents && d->depth == 2 && strcmp(name, "Contents") == 0) {
    d->in_contents = false;
    sl__s3_object *o = d->have_key && d->have_size ? sl__vec_push(&d->objects) : NULL;
    if (!d->have_key || !d->have_size) {
      free_object(&d->cur);
      refuse(d, "an object without its Key or Size");
    } else if (o == NULL) {
      free_object(&d->cur);
      refuse(d, "out of memory");
    } else {
      *o = d->cur;
      memset(&d->cur, 0, sizeof d->cur);
    }
  }
  d->depth--;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sys, const XML_Char *pub,
                               int internal) {
  (void)name;
  (void)sys;
  (void)pub;
  (void)internal;
  refuse(ud, "a DOCTYPE (not accepted)");
}

/* Runs the parser over the body; true when the document is well-formed and accepted. */
static bool run(doc *d, const char *xml, size_t len) {
  if (len > SL_S3_XML_MAX_BYTES) {
    d->defect = "a body larger than 16 MiB";
    return false;
  }
  d->p = XML_ParserCreate("UTF-8");
  if (d->p == NULL) {
    d->defect = "out of memory";
    return false;
  }
  XML_SetUserData(d->p, d);
  XML_SetElementHandler(d->p, on_start, on_end);
  XML_SetCharacterDataHandler(d->p, on_text);
  XML_SetStartDoctypeDeclHandler(d->p, on_doctype);
  XML_SetParamEntityParsing(d->p, XML_PARAM_ENTITY_PARSING_NEVER);
  sl__buf_init(&d->text, FIELD_MAX);
  sl__vec_init(&d->objects, sizeof(sl__s3_object));
  enum XML_Status xs = XML_Parse(d->p, xml, (int)len, XML_TRUE);
  if (xs != XML_STATUS_OK && d->defect == NULL)
    d->defect = (char *)XML_ErrorString(XML_GetErrorCode(d->p));
  if (xs == XML_STATUS_OK && !d->root_seen)
    d->defect = "no root element";
  free_object(&d->cur);
  sl__buf_free(&d->text);
  return d->defect == NULL;
}

static void free_objects(sl__vec *v) {
  for (size_t i = 0; i < v->len; i++)
    free_object(&SL_VEC_AT(v, sl__s3_object, i));
  sl__vec_free(v);
}

void sl__s3_page_free(sl__s3_page *p) {
  if (p == NULL)
    return;
  for (size_t i = 0; i < p->n; i++)
    free_object(&p->objects[i]);
  free(p->objects);
  free(p->next_token);
  memset(p, 0, sizeof *p);
}

sl_status sl__s3_parse_list(const char *xml, size_t len, const char *what, sl__s3_page *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  doc d = {.list = true, .root = "ListBucketResult", .page = out};
  bool ok = run(&d, xml, len);
  unsigned long line = d.p != NULL ? (unsigned long)XML_GetCurrentLineNumber(d.p) : 0;
  if (d.p != NULL)
    XML_ParserFree(d.p);
  if (!ok) {
    free_objects(&d.objects);
    sl__s3_page_free(out);
    return sl__err_hub(err, SL_HUB_CAUSE_METADATA, "%s: not a ListObjectsV2 reply: %s (line %lu)", what,
                       d.defect, line);
  }
  out->n = d.objects.len;
  out->objects = d.objects.data;
  return SL_STATUS_OK;
}

bool sl__s3_parse_error(const char *xml, size_t len, sl__s3_error_doc *out) {
  memset(out, 0, sizeof *out);
  doc d = {.list = false, .root = "Error", .error = out};
  bool ok = run(&d, xml, len);
  if (d.p != NULL)
    XML_ParserFree(d.p);
  sl__vec_free(&d.objects);
  if (!ok)
    memset(out, 0, sizeof *out);
  return ok;
}
