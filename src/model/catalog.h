/*
 * model/catalog.h — every tensor of every selected weight file (name, dtype, shape, file, absolute
 * offset, byte length) plus config.json: what rank 0 parses once and broadcasts as one compact
 * blob, so that thousands of ranks do not each hit the file system's metadata servers.
 * Pure (no MPI): the broadcast is comm/comm.c's sl__comm_bcast_blob.
 */
#ifndef SL_CATALOG_H
#define SL_CATALOG_H

#include "base/err.h"
#include "base/hashmap.h"
#include "base/util.h"
#include "format/dtype.h"
#include "model/file_select.h"
#include "model/sharded_name.h"

#include <stdbool.h>
#include <stdint.h>

#define SL_NONE UINT32_MAX
/* The largest config.json read (real ones are KiB; the JSON limits of base/json.h bound the rest). */
#define SL_CONFIG_MAX_BYTES (64u * 1024u * 1024u)
/* Dimensions of a tensor: the public header's SL_MAX_DIMS is the one owner of the number. */
#define SL_CAT_MAX_DIMS SL_MAX_DIMS

typedef struct sl__cat_file {
  char *path;       /* full path of the file */
  char *name;       /* basename */
  uint64_t size;    /* bytes */
  int64_t mtime_ns; /* modification and change time when the header was read (0: not known) */
  int64_t ctime_ns;
  char *etag; /* an object of a store (path s3://bucket/key), pinned to this ETag; NULL: a local file */
} sl__cat_file;

/* What one rank saw of an open file: compared again after its last read. */
typedef struct sl__file_stamp {
  bool valid;
  uint64_t size, dev, ino;
  int64_t mtime_ns, ctime_ns;
} sl__file_stamp;

typedef struct sl__cat_tensor {
  char *name;    /* after Mistral renaming (format mistral); the checkpoint name otherwise */
  uint32_t file; /* index into files */
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[SL_CAT_MAX_DIMS];
  uint64_t offset; /* absolute byte offset in the file */
  uint64_t nbytes;
} sl__cat_tensor;

typedef struct sl__catalog {
  char *folder;      /* the model folder the files were selected from */
  sl__format format; /* effective load format */
  bool use_safetensors;
  bool arriving; /* the files are still downloading (docs/spec/HUB.md §13): each is read once complete */
  sl__sharded_layout saved; /* format sharded_state: the layout its files say they were saved at
                               (every file the same; zero: they do not say) */
  size_t n_files;
  sl__cat_file *files; /* natural order */
  size_t n_tensors;
  sl__cat_tensor *tensors; /* file order, then offset order */
  char *config_json;       /* config.json text, or NULL when absent */
  size_t config_len;
  sl__hashmap by_name;  /* name → tensor index */
  size_t index_missing; /* rank 0: index tensor names no selected file holds (warned; not broadcast) */
  uint32_t opens;       /* rank 0: weight files opened to read their headers (the report's; not broadcast) */
} sl__catalog;

typedef struct sl__catalog_opts {
  const char *folder;             /* model folder (local or a Hub snapshot) */
  const char *what;               /* the model argument, for "Cannot find any model weights with ..." */
  sl__select_opts select;         /* format AUTO is resolved on the folder */
  bool require_config;            /* config.json must exist */
  size_t n_renames;               /* name renaming (Mistral consolidated → HF), applied when the */
  const char *const *rename_from; /* effective format equals rename_format; {layer} matches digits */
  const char *const *rename_to;
  const char *rename_format;
  const char *config_json; /* config.json's text already in hand (an object store's), or NULL: read */
  size_t config_len;       /* from folder */
} sl__catalog_opts;

sl_status sl__catalog_build(const sl__catalog_opts *opts, sl__catalog *out, sl__err *err);

/* One safetensors file of sl__catalog_from_headers: its first bytes (at least 8 + N) and size as the
 * Hub gave them before the download, or prefix NULL: read from opts->folder/name, already there.
 * With etag: an object of a store (opts->folder is its s3:// location), read in place, not arriving. */
typedef struct sl__cat_header_src {
  const char *name;
  uint64_t size;
  const uint8_t *prefix;
  size_t prefix_len;
  const char *etag;
} sl__cat_header_src;

/* The catalog of safetensors files given by their headers (in this order), the files themselves
 * possibly still downloading into opts->folder (catalog.arriving is then set, and the times stay
 * unknown: each rank's first open records them), or objects of a store (with their ETags; the
 * catalog's format is then opts->select.format, as a folder's would be). config.json is read from
 * opts->folder unless opts gives it. The same checks, renames and errors as sl__catalog_build. */
sl_status sl__catalog_from_headers(const sl__catalog_opts *opts, const sl__cat_header_src *src, size_t n,
                                   sl__catalog *out, sl__err *err);
/* An open descriptor of file f still has the size and the modification and change times the
 * catalog recorded (a file replaced, truncated or rewritten since its header was read must not be
 * read at the old offsets). With stamp: an invalid stamp is filled in (at open); a valid one stands
 * for the catalog's times (taken at open, or this rank's own copy accepted by its size and header)
 * and must still match in size, times, inode and device (nothing changed meanwhile). */
sl_status sl__cat_file_check(const sl__catalog *c, uint32_t f, int fd, sl__file_stamp *stamp, sl__err *err);
/* What fstat says of fd now (false when it fails). */
bool sl__cat_file_stamp(int fd, sl__file_stamp *out);
/* Whether a stamp is the file the catalog read: its size and its modification and change times
 * (false when the catalog knows no times). */
bool sl__cat_file_same(const sl__catalog *c, uint32_t f, const sl__file_stamp *s);
void sl__catalog_free(sl__catalog *c);
/* Whether file f is an object of a store (read with ranged GETs, engine/remote.c), and whether any is. */
static inline bool sl__cat_file_remote(const sl__catalog *c, uint32_t f) {
  return c->files[f].etag != NULL;
}
bool sl__catalog_remote(const sl__catalog *c);
/* Index of the tensor named name, or SL_NONE. */
uint32_t sl__catalog_find(const sl__catalog *c, const char *name);

/* One self-describing little-endian blob; deserialize validates every length against the blob. */
sl_status sl__catalog_serialize(const sl__catalog *c, uint8_t **blob, size_t *len, sl__err *err);
sl_status sl__catalog_deserialize(const uint8_t *blob, size_t len, sl__catalog *out, sl__err *err);

/* Applies one rename rule (template with {layer}) to name; returns a new string or NULL. */
char *sl__rename_apply(const char *name, const char *from, const char *to);

#endif
