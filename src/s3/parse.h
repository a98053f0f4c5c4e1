/*
 * s3/parse.h — the parsers of what an S3 client reads from outside: AWS's shared credentials and
 * config files (s3/ini.c) and the XML replies of S3 (s3/xml.c: ListObjectsV2 pages and error
 * documents). Pure: they take bytes and give tables; each bounds what it is given before it
 * allocates, and each has a fuzz target (tests/fuzz/fuzz_s3_ini.c, fuzz_s3_xml.c).
 */
#ifndef SL_S3_PARSE_H
#define SL_S3_PARSE_H

#include "base/err.h"
#include "s3/s3.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- AWS ini files (s3/ini.c) ---- */

/* Largest credentials or config file read. */
#define SL_S3_INI_MAX_BYTES (1024u * 1024u)

/* One line of the file that means something: a section header (key NULL) or a setting. A setting
 * indented under a setting with an empty value ("s3 =" then "  addressing_style = path") is that
 * setting's sub-setting: key is the parent, sub the setting's own name. */
typedef struct sl__s3_ini_entry {
  const char *section; /* as written between the brackets, spaces at either end removed */
  const char *key;     /* lower-cased (as Python's configparser does), or NULL: the section header */
  const char *sub;     /* lower-cased sub-setting name, or NULL */
  const char *value;   /* spaces at either end removed */
  uint32_t line;       /* 1-based */
} sl__s3_ini_entry;

typedef struct sl__s3_ini {
  size_t n;
  sl__s3_ini_entry *entries; /* in file order; every string points into arena */
  char *arena;
} sl__s3_ini;

/* Parses len bytes of an AWS ini file (at most SL_S3_INI_MAX_BYTES, no NUL byte): "[section]"
 * headers, "key = value" or "key: value" settings, full-line '#' and ';' comments, blank lines,
 * indented sub-settings. A setting before any section, a line that is none of these, an empty key
 * or an unclosed bracket: SL_STATUS_CONFIG naming `what` and the line. The continuation lines of a
 * non-empty value are skipped (no setting the client reads has one). */
sl_status sl__s3_ini_parse(const char *text, size_t len, const char *what, sl__s3_ini *out, sl__err *err);
void sl__s3_ini_free(sl__s3_ini *ini);
/* The value of the last such setting (sub NULL: a plain setting), or NULL. */
const char *sl__s3_ini_get(const sl__s3_ini *ini, const char *section, const char *key, const char *sub);
/* Whether the file has a section of that name. */
bool sl__s3_ini_has_section(const sl__s3_ini *ini, const char *section);

/* ---- S3 XML (s3/xml.c) ---- */

/* Largest XML body read (a ListObjectsV2 page of 1000 keys of 1024 bytes is about 1.5 MiB). */
#define SL_S3_XML_MAX_BYTES (16u * 1024u * 1024u)
/* Most objects one page may hold (S3 sends at most 1000). */
#define SL_S3_PAGE_MAX_KEYS 10000u

typedef struct sl__s3_page {
  size_t n;
  sl__s3_object *objects; /* Contents, in document order */
  bool truncated;         /* IsTruncated */
  char *next_token;       /* NextContinuationToken, or NULL */
} sl__s3_page;

/* One ListObjectsV2Result page: each Contents' Key (non-empty, at most SL_S3_KEY_MAX bytes),
 * Size (a decimal integer) and ETag, IsTruncated and NextContinuationToken. No DOCTYPE, no
 * entities of its own, at most 16 levels deep. A defect: SL_STATUS_IO naming `what`. */
sl_status sl__s3_parse_list(const char *xml, size_t len, const char *what, sl__s3_page *out, sl__err *err);
void sl__s3_page_free(sl__s3_page *p);

/* What an S3 error document says (fields empty when absent; longer texts cut). */
typedef struct sl__s3_error_doc {
  char code[64];
  char message[512];
  char region[64]; /* Region: where the bucket is (AuthorizationHeaderMalformed, PermanentRedirect) */
} sl__s3_error_doc;

/* Reads an <Error> document; false when the body is not one (then out is all empty). */
bool sl__s3_parse_error(const char *xml, size_t len, sl__s3_error_doc *out);

#endif
