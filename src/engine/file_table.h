/*
 * engine/file_table.h — the checkpoint files one rank opens during one load, each once: the
 * descriptors everything that reads a file shares (rank 0's page-cache measure before planning, the
 * parameter mappings, the reads), the identity each file must keep, and how many times this rank
 * opened a checkpoint file (the report's file_opens, docs/REPORT.md §5).
 *
 * A file is checked when it is opened for reading, before any byte of it is used
 * (docs/spec/STORAGE.md §2): it is rank 0's file when its size and times are the catalog's, or the
 * node's own copy — the one this rank's storage probe accepted (its stamp), or, on a rank that did
 * not probe, a copy of the same size whose header fingerprint equals rank 0's where the probe
 * compared copies of that file. Anything else fails with the identity check's error
 * (model/catalog.h, sl__cat_file_check).
 */
#ifndef SL_ENGINE_FILE_TABLE_H
#define SL_ENGINE_FILE_TABLE_H

#include "base/err.h"
#include "model/catalog.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sl__file_table {
  size_t n_files;
  int *fds;               /* per file: open for reading, or -1 */
  sl__file_stamp *stamps; /* per file: the identity it must keep (valid), or none yet (taken at open) */
  uint64_t *prints;       /* per file: rank 0's fingerprint where the probe compared copies, else 0 */
  bool safetensors;       /* fingerprints cover the safetensors header (else the first 64 KiB) */
  _Atomic uint32_t opens; /* open() calls on checkpoint files: the table's and the probe's */
} sl__file_table;

/* An empty table for cat's files (no descriptor, no stamp, no fingerprint). */
sl_status sl__file_table_init(sl__file_table *t, const sl__catalog *cat, sl__err *err);
/* Closes every descriptor; the stamps and the count stay (a later get opens again). */
void sl__file_table_close(sl__file_table *t);
void sl__file_table_free(sl__file_table *t);

/* open(path, read-only), counted: the storage probe's looks, which keep no descriptor here. */
int sl__file_table_open_path(sl__file_table *t, const char *path);

/* File f's descriptor for reading: the table's, or opened now and checked (see above) first.
 * Not thread-safe: callers serialize. The descriptor stays the table's. */
sl_status sl__file_table_get(sl__file_table *t, const sl__catalog *cat, uint32_t f, int *fd, sl__err *err);

/* The fingerprint of an open file of `size` bytes: its size and its header (safetensors: the
 * 8-byte length and the JSON it announces, up to 100 MiB within the file; otherwise the first
 * 64 KiB). *ok is false when it cannot be read (the result is then 0). */
uint64_t sl__file_fingerprint(int fd, uint64_t size, bool safetensors, bool *ok);

#endif
