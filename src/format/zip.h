/*
 * format/zip.h — strict reading of the central directory of a zip archive as torch.save writes it
 * (docs/spec/FILES.md §8.1): end-of-central-directory record, ZIP64 when present, every entry
 * validated (name, sizes, offsets inside the file, no overlap, STORED only) and the absolute byte
 * range of each entry's data computed from its local header, so ranks can range-read storages.
 * Pure: the file is reached through a read callback (a descriptor, or memory for the fuzzer).
 */
#ifndef SL_ZIP_H
#define SL_ZIP_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

#define SL_ZIP_MAX_ENTRIES 1000000u         /* more entries → refused */
#define SL_ZIP_MAX_NAME 4096u               /* longest accepted entry name */
#define SL_ZIP_MAX_CD ((uint64_t)256 << 20) /* largest accepted central directory */

/* Reads exactly n bytes at off; returns SL_STATUS_OK or an error already set in err. */
typedef sl_status (*sl__zip_read_fn)(void *ctx, uint64_t off, void *dst, size_t n, sl__err *err);

typedef struct sl__zip_entry {
  const char *name;    /* NUL-terminated, into sl__zip_dir.names */
  size_t name_len;     /* bytes (names never contain NUL) */
  uint64_t header_off; /* local file header */
  uint64_t data_off;   /* first data byte: header_off + 30 + local name + local extra */
  uint64_t size;       /* data bytes (stored: compressed == uncompressed) */
} sl__zip_entry;

typedef struct sl__zip_dir {
  size_t n;
  sl__zip_entry *entries; /* central directory order */
  char *names;            /* arena of the names */
} sl__zip_dir;

/* Where the archive's bytes come from. */
typedef struct sl__zip_src {
  sl__zip_read_fn read;
  void *ctx;
  uint64_t size; /* file size */
} sl__zip_src;

/* Parses and validates the whole directory. `what` names the file in every message. Errors are
 * SL_STATUS_PICKLE (not a zip, a malformed or hostile directory, a compressed or encrypted
 * entry); I/O errors come from the callback. On error *out is zeroed. */
sl_status sl__zip_read_dir(const sl__zip_src *src, const char *what, sl__zip_dir *out, sl__err *err);

/* The entry named name (exact bytes), or NULL. */
const sl__zip_entry *sl__zip_find(const sl__zip_dir *d, const char *name);

void sl__zip_dir_free(sl__zip_dir *d);

/* A read callback over memory: ctx points at an sl__zip_mem. */
typedef struct sl__zip_mem {
  const uint8_t *data;
  size_t len;
  const char *what;
} sl__zip_mem;
sl_status sl__zip_mem_read(void *ctx, uint64_t off, void *dst, size_t n, sl__err *err);

#endif
