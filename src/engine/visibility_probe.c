/*
 * engine/visibility_probe.c — which ranks of the job can read which checkpoint files (the
 * configuration key storage; docs/spec/STORAGE.md). COLLECTIVE, after rank 0's catalog reached
 * every rank. The ranks of a node see one file system: the first rank of each node looks for the
 * node, the others open nothing here (a file opened for reading answers the identity check,
 * engine/file_table.h), so the metadata servers see one probe per node, not per rank:
 *   1. the first rank of each node opens each file at its path: the file the catalog read (its size
 *      and times: a shared volume) is seen; a file of another size, or none, is not; one of the same
 *      size with other times is a copy (a node's own disk) to compare. Rank 0 built the catalog from
 *      its files: it sees them all without looking;
 *   2. if some node holds a copy, rank 0 sends the fingerprint of those files' headers to every rank
 *      (the first ranks compare their own: equal, the node reads from its copy; different, it
 *      receives that file; the others keep them for the check at open);
 *   3. the first ranks' rows of bits reach every rank (an allgather), and every rank of a node takes
 *      its first rank's row.
 * While the files still arrive from the Hub they cannot be looked at: rank 0 writes a token file
 * into the model folder instead, and the ranks that read the same token there see the folder (a
 * shared volume or cache); the others, a node-local cache elsewhere, receive every byte. That one
 * open is each rank's own.
 * Every rank takes part in every collective whatever happened locally (a rank that stopped would
 * hang the others); a local failure is returned for the caller's agreement.
 */
#include "engine/visibility_probe.h"

#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

typedef enum seen { SEEN_NO, SEEN_SAME, SEEN_COPY } seen;

/* Step 1 for file f: what this node sees at its path (the stamp kept when it may read it). */
static seen look(const sl__catalog *cat, uint32_t f, sl__file_table *files, int *fd_out) {
  *fd_out = -1;
  sl__file_stamp *stamp = &files->stamps[f];
  int fd = sl__file_table_open_path(files, cat->files[f].path);
  if (fd < 0) {
    SL_DEBUG("cannot open %s: %s", cat->files[f].path, strerror(errno));
    return SEEN_NO;
  }
  if (!sl__cat_file_stamp(fd, stamp) || stamp->size != cat->files[f].size) {
    SL_WARN("%s here is not the file rank 0 read (%llu bytes, expected %llu): its bytes come from ranks that "
            "have it",
            cat->files[f].path, (unsigned long long)stamp->size, (unsigned long long)cat->files[f].size);
    close(fd);
    stamp->valid = false;
    return SEEN_NO;
  }
  if (sl__cat_file_same(cat, f, stamp)) {
    close(fd);
    return SEEN_SAME;
  }
  *fd_out = fd;
  return SEEN_COPY;
}

/* Step 2: rank 0's fingerprints of the files some node holds a copy of reach every rank (kept in
 * the table for the check at open); the first ranks holding a copy compare their own. Rank 0
 * measures its files through the table: the descriptor serves its reads later. */
static sl_status compare_copies(sl__comm *c, const sl__catalog *cat, const uint8_t *any_copy, seen *mine,
                                int *fds, sl__file_table *files, sl__err *err) {
  uint32_t n = (uint32_t)cat->n_files;
  uint8_t *blob = NULL;
  size_t len = 0;
  if (c->rank == 0) {
    len = (size_t)n * sizeof(uint64_t);
    blob = calloc(len + 1, 1);
    for (uint32_t f = 0; blob != NULL && f < n; f++) {
      if (!((any_copy[f / 8] >> (f % 8)) & 1u))
        continue;
      int fd = -1;
      bool ok = sl__file_table_get(files, cat, f, &fd, NULL) == SL_STATUS_OK; /* else its read says why */
      uint64_t h = ok ? sl__file_fingerprint(fd, cat->files[f].size, files->safetensors, &ok) : 0;
      memcpy(blob + (size_t)f * sizeof h, &h, sizeof h);
    }
    if (blob == NULL)
      len = 0;
  }
  sl_status st = sl__comm_bcast_blob(c, &blob, &len, 0, err);
  bool whole = st == SL_STATUS_OK && len == (size_t)n * sizeof(uint64_t);
  for (uint32_t f = 0; whole && c->rank != 0 && f < n; f++)
    memcpy(&files->prints[f], blob + (size_t)f * sizeof files->prints[f], sizeof files->prints[f]);
  for (uint32_t f = 0; st == SL_STATUS_OK && f < n; f++) {
    if (mine[f] != SEEN_COPY)
      continue;
    bool ok = whole;
    uint64_t h = ok ? sl__file_fingerprint(fds[f], cat->files[f].size, files->safetensors, &ok) : 0;
    if (!ok || files->prints[f] == 0 || h != files->prints[f]) {
      SL_WARN(
          "%s here differs from rank 0's (same size, another header): its bytes come from ranks that have "
          "it",
          cat->files[f].path);
      mine[f] = SEEN_NO;
      files->stamps[f].valid = false;
    }
  }
  free(blob);
  return st;
}

/* This rank's row of bits: the files it sees (after the copies were compared). */
static void my_row(const seen *mine, uint32_t n, uint8_t *bits) {
  for (uint32_t f = 0; f < n; f++)
    if (mine[f] != SEEN_NO)
      bits[f / 8] |= (uint8_t)(1u << (f % 8));
}

/* Per rank, the first rank of its node (every rank its own when the job's nodes are unknown). */
static uint32_t *node_firsts(const sl__node_layout *nodes, uint32_t world) {
  uint32_t *first = calloc((size_t)world + 1, sizeof *first);
  uint32_t *of_node = nodes->node_of != NULL ? malloc(((size_t)nodes->n_nodes + 1) * sizeof *of_node) : NULL;
  if (first == NULL || (nodes->node_of != NULL && of_node == NULL)) {
    free(first);
    free(of_node);
    return NULL;
  }
  for (uint32_t i = 0; of_node != NULL && i < nodes->n_nodes; i++)
    of_node[i] = SL_NONE;
  for (uint32_t r = 0; r < world; r++) {
    uint32_t node = of_node != NULL ? nodes->node_of[r] : SL_NONE;
    if (node == SL_NONE || node >= nodes->n_nodes) {
      first[r] = r;
      continue;
    }
    if (of_node[node] == SL_NONE)
      of_node[node] = r;
    first[r] = of_node[node];
  }
  free(of_node);
  return first;
}

/* Every buffer is allocated before the first collective: a rank that ran out of memory returns
 * before it, and the others' waits end at the watchdog's deadline (timeout_s) naming it. */
static sl_status probe_auto(sl__comm *c, const sl__catalog *cat, const sl__node_layout *nodes,
                            sl__visibility *out, sl__file_table *files, sl__err *err) {
  uint32_t n = (uint32_t)cat->n_files;
  uint32_t world = (uint32_t)c->size;
  uint32_t me = (uint32_t)c->rank;
  size_t row = ((size_t)n + 7) / 8;
  seen *mine = calloc((size_t)n + 1, sizeof *mine);
  int *fds = calloc((size_t)n + 1, sizeof *fds);
  uint8_t *copies = calloc(row + 1, 1);
  uint8_t *bits = calloc(row + 1, 1);
  uint32_t *first = node_firsts(nodes, world);
  if (mine == NULL || fds == NULL || copies == NULL || bits == NULL || first == NULL ||
      !sl__visibility_alloc(out, world, n)) {
    free(mine);
    free(fds);
    free(copies);
    free(bits);
    free(first);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory checking which files each rank sees");
  }
  for (uint32_t f = 0; f < n; f++) {
    fds[f] = -1;
    mine[f] = me == 0 ? SEEN_SAME : first[me] == me ? look(cat, f, files, &fds[f]) : SEEN_NO;
    if (mine[f] == SEEN_COPY)
      copies[f / 8] |= (uint8_t)(1u << (f % 8));
  }
  sl_status st = sl__comm_allreduce_bor(c, copies, row, err);
  bool any = false;
  for (size_t i = 0; i < row; i++)
    any = any || copies[i] != 0;
  if (st == SL_STATUS_OK && any) /* the same answer on every rank: all take part in the broadcast or none */
    st = compare_copies(c, cat, copies, mine, fds, files, err);
  for (uint32_t f = 0; f < n; f++)
    if (fds[f] >= 0)
      close(fds[f]);
  my_row(mine, n, bits);
  if (st == SL_STATUS_OK)
    st = sl__comm_allgather(c, bits, row, out->sees, "which files each node sees", err);
  for (uint32_t r = 0; st == SL_STATUS_OK && r < world; r++) /* the node's answer is its ranks' */
    if (first[r] != r)
      memcpy(out->sees + (size_t)r * row, out->sees + (size_t)first[r] * row, row);
  if (st == SL_STATUS_OK)
    sl__visibility_count(out);
  free(mine);
  free(fds);
  free(copies);
  free(bits);
  free(first);
  return st;
}

#define SL_PROBE_TOKEN_BYTES 16

/* Rank 0's token file in the folder: its path from the token's bytes. */
static void token_path(const sl__catalog *cat, const uint8_t *token, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/.shardload-probe-", cat->folder);
  for (int i = 0; i < SL_PROBE_TOKEN_BYTES && n > 0 && (size_t)n + 3 < cap; i++)
    n += snprintf(out + n, cap - (size_t)n, "%02x", token[i]);
}

/* Rank 0 writes a random token into the folder; true when it could. */
static bool token_write(const sl__catalog *cat, uint8_t *token) {
  if (getrandom(token, SL_PROBE_TOKEN_BYTES, GRND_NONBLOCK) != SL_PROBE_TOKEN_BYTES)
    return false;
  char path[4096];
  token_path(cat, token, path, sizeof path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    SL_DEBUG("cannot write %s (taking the model folder as shared): %s", path, strerror(errno));
    return false;
  }
  bool ok = write(fd, token, SL_PROBE_TOKEN_BYTES) == SL_PROBE_TOKEN_BYTES;
  ok = close(fd) == 0 && ok;
  if (!ok)
    unlink(path);
  return ok;
}

/* Whether this rank reads rank 0's token at its path. */
static bool token_seen(const sl__catalog *cat, const uint8_t *token) {
  char path[4096];
  token_path(cat, token, path, sizeof path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t got[SL_PROBE_TOKEN_BYTES + 1];
  bool ok = fd >= 0 && read(fd, got, sizeof got) == SL_PROBE_TOKEN_BYTES &&
            memcmp(got, token, SL_PROBE_TOKEN_BYTES) == 0;
  if (fd >= 0)
    close(fd);
  return ok;
}

/* The files still arrive: who sees rank 0's model folder sees them all, when they come. A rank
 * that could not allocate its answer's room returns before the allgather; the others' wait ends at
 * the watchdog's deadline (timeout_s), naming it. */
static sl_status probe_folder(sl__comm *c, const sl__catalog *cat, sl__visibility *out, sl__err *err) {
  uint32_t world = (uint32_t)c->size;
  uint32_t n = (uint32_t)cat->n_files;
  uint8_t *blob = NULL;
  size_t len = 0;
  if (c->rank == 0) {
    blob = calloc(SL_PROBE_TOKEN_BYTES, 1);
    len = blob != NULL && token_write(cat, blob) ? SL_PROBE_TOKEN_BYTES : 0;
  }
  sl_status st = sl__comm_bcast_blob(c, &blob, &len, 0, err);
  bool wrote = st == SL_STATUS_OK && len == SL_PROBE_TOKEN_BYTES;
  uint8_t mine = c->rank == 0 || (wrote && token_seen(cat, blob));
  uint8_t *who = calloc((size_t)world + 1, 1);
  if (st == SL_STATUS_OK && wrote)
    st = who != NULL ? sl__comm_allgather(c, &mine, 1, who, "which ranks see the model folder", err)
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (c->rank == 0 && wrote) {
    char path[4096];
    token_path(cat, blob, path, sizeof path);
    unlink(path);
  }
  bool all = true;
  for (uint32_t r = 0; st == SL_STATUS_OK && wrote && r < world; r++)
    all = all && who[r];
  if (st == SL_STATUS_OK && (!wrote || all)) {
    sl__visibility_everywhere(out, world, n);
  } else if (st == SL_STATUS_OK) {
    if (!sl__visibility_alloc(out, world, n))
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    for (uint32_t r = 0; st == SL_STATUS_OK && r < world; r++)
      for (uint32_t f = 0; f < n && who[r]; f++)
        sl__visibility_set(out, r, f);
    if (st == SL_STATUS_OK)
      sl__visibility_count(out);
  }
  free(who);
  free(blob);
  return st;
}

sl_status sl__visibility_probe(sl__comm *c, const sl__catalog *cat, sl__storage mode,
                               const sl__node_layout *nodes, sl__visibility *out, sl__file_table *files,
                               sl__err *err) {
  uint32_t world = (uint32_t)c->size;
  uint32_t n = (uint32_t)cat->n_files;
  /* Objects of a store (s3://) are read by every rank over the network: nothing to look at. */
  if (mode == SL_STORAGE_SHARED || world == 1 || sl__catalog_remote(cat)) {
    sl__visibility_everywhere(out, world, n);
    return SL_STATUS_OK;
  }
  if (mode == SL_STORAGE_LOCAL)
    return sl__visibility_first_node(out, world, n, nodes)
               ? SL_STATUS_OK
               : sl__err_set(err, SL_STATUS_NOMEM, "out of memory placing the checkpoint's files");
  sl_status st = cat->arriving ? probe_folder(c, cat, out, err) : probe_auto(c, cat, nodes, out, files, err);
  if (st == SL_STATUS_OK && c->rank == 0 && !out->everywhere) {
    uint32_t all = 0;
    for (uint32_t r = 0; r < world; r++) {
      uint32_t k = 0;
      for (uint32_t f = 0; f < n; f++)
        k += sl__visibility_sees(out, r, f);
      all += k == n;
    }
    SL_INFO(
        "storage: %u of %u ranks can read every checkpoint file; the others receive the bytes they cannot "
        "read from ranks that can",
        all, world);
  }
  return st;
}
