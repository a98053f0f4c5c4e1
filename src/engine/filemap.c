/*
 * engine/filemap.c — zero-copy host parameters for the mmap load strategy (see engine/filemap.h).
 */
#include "engine/filemap.h"

#include "engine/residency.h"
#include "engine/strategy_choice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct mapper {
  const sl__catalog *cat;
  const sl__schedule *s;
  const sl__rank_plan *plan;
  sl__file_table *files; /* the load's, or NULL: fds are this call's own */
  uint32_t *first;       /* copies by parameter (CSR over plan->copies) */
  uint32_t *list;
  uint32_t *per_piece; /* this rank's copies per piece */
  int *fds;            /* per file, -1 until opened */
  bool cold_direct;    /* load_strategy auto: cold parameters go to O_DIRECT (sl__strategy_map_param) */
  signed char *direct; /* per file: takes O_DIRECT (1), refuses it (0), not asked yet (-1) */
  uint64_t page;
  uint64_t vmas_left;
  sl__filemaps *out;
  sl__err *err;
} mapper;

/* Where copy c's bytes sit: absolute file offset and the parameter offset they go to. */
static uint64_t file_off_of(const mapper *m, const sl__copy *c) {
  return m->cat->tensors[c->tensor].offset + c->src_off;
}

/* The whole pages [*lo, *hi) of parameter range [a, a + len) in page-phase coordinates. */
static bool interior(uint64_t page, uint64_t a, uint64_t len, uint64_t *lo, uint64_t *hi) {
  *lo = (a + page - 1) / page * page;
  *hi = (a + len) / page * page;
  return *hi > *lo;
}

/* Whether parameter i can be mapped; its page phase (offset of byte 0 within a page) and the
 * mappings it costs. */
static bool eligible(const mapper *m, size_t i, const bool *skip, uint64_t *phase, uint64_t *vmas) {
  const sl__lparam *lp = &m->plan->lparams[i];
  if (lp->alias_of != SL_NONE || (skip != NULL && skip[i]) || lp->nbytes == 0 || lp->transposed > 0 ||
      m->first[i] == m->first[i + 1])
    return false;
  uint64_t ph = UINT64_MAX;
  for (uint32_t k = m->first[i]; k < m->first[i + 1]; k++) {
    const sl__copy *c = &m->plan->copies[m->list[k]];
    if (c->rows > 1 || c->piece == SL_NONE)
      return false;
    const sl__piece *P = &m->s->pieces[c->piece];
    if (P->rows > 1 || P->group != SL_NONE || P->reader != m->plan->ctx.rank || m->per_piece[c->piece] != 1)
      return false;
    uint64_t p = (file_off_of(m, c) % m->page + m->page - c->dst_off % m->page) % m->page;
    if (ph != UINT64_MAX && p != ph)
      return false;
    ph = p;
  }
  if (ph % SL_FILEMAP_ALIGN != 0 || lp->nbytes > SIZE_MAX - 2 * m->page)
    return false;
  uint64_t n = 1, whole = 0;
  for (uint32_t k = m->first[i]; k < m->first[i + 1]; k++) {
    const sl__copy *c = &m->plan->copies[m->list[k]];
    uint64_t lo, hi;
    if (interior(m->page, ph + c->dst_off, c->row_bytes, &lo, &hi)) {
      whole += hi - lo;
      n += 2; /* the file mapping, and the split it makes in the reservation */
    }
  }
  *phase = ph;
  *vmas = n;
  return whole > 0;
}

static sl_status file_fd(mapper *m, uint32_t f, int *fd) {
  if (m->fds[f] < 0 && m->files != NULL) {
    sl_status st = sl__file_table_get(m->files, m->cat, f, &m->fds[f], m->err);
    if (st != SL_STATUS_OK)
      return st;
  } else if (m->fds[f] < 0) {
    const char *path = m->cat->files[f].path;
    int d = open(path, O_RDONLY | O_CLOEXEC);
    if (d < 0)
      return sl__err_set(m->err, SL_STATUS_IO, "cannot open %s: %s", path, strerror(errno));
    sl_status st = sl__cat_file_check(m->cat, f, d, NULL, m->err);
    if (st != SL_STATUS_OK) {
      close(d);
      return st;
    }
    m->fds[f] = d;
  }
  *fd = m->fds[f];
  return SL_STATUS_OK;
}

/* Whether file f's file system takes O_DIRECT (asked once per file, on its open descriptor fd). */
static bool takes_o_direct(mapper *m, uint32_t f, int fd) {
  if (m->direct[f] < 0)
    m->direct[f] = sl__probe_o_direct(fd);
  return m->direct[f] > 0;
}

/* Under auto: whether eligible parameter i stays a mapping, from what the page cache holds of
 * its file ranges (sl__strategy_map_param). */
static sl_status keep_mapping(mapper *m, size_t i, bool *keep) {
  uint64_t pages = 0, resident = 0;
  bool known = true, o_direct = true;
  sl_status st = SL_STATUS_OK;
  for (uint32_t k = m->first[i]; k < m->first[i + 1] && st == SL_STATUS_OK; k++) {
    const sl__copy *c = &m->plan->copies[m->list[k]];
    uint32_t f = m->cat->tensors[c->tensor].file;
    int fd = -1;
    if ((st = file_fd(m, f, &fd)) == SL_STATUS_OK) {
      known = known && sl__residency(fd, file_off_of(m, c), c->row_bytes, &pages, &resident);
      o_direct = o_direct && takes_o_direct(m, f, fd);
    }
  }
  *keep = sl__strategy_map_param(m->plan->lparams[i].nbytes, pages, resident, known, o_direct);
  return st;
}

static sl_status read_edge(mapper *m, int fd, uint32_t f, uint8_t *dst, uint64_t len, uint64_t off) {
  m->out->bytes_edges += len;
  return sl__pread_full(fd, dst, len, off, false, m->cat->files[f].path, NULL, NULL, m->err);
}

/* Builds parameter i at page phase ph: a reservation of anonymous (zero) memory, the whole pages
 * of every copy mapped over it from the file, the edge bytes read into it. */
static sl_status map_param(mapper *m, size_t i, uint64_t ph, void **ptr) {
  const sl__lparam *lp = &m->plan->lparams[i];
  size_t len = (size_t)((ph + lp->nbytes + m->page - 1) / m->page * m->page);
  uint8_t *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED)
    return sl__err_set(m->err, SL_STATUS_NOMEM, "cannot reserve %zu bytes of address space: %s", len,
                       strerror(errno));
  m->out->regions[m->out->n_regions++] = (sl__filemap_region){.base = base, .len = len};
  for (uint32_t k = m->first[i]; k < m->first[i + 1]; k++) {
    const sl__copy *c = &m->plan->copies[m->list[k]];
    uint32_t f = m->cat->tensors[c->tensor].file;
    int fd = -1;
    sl_status st = file_fd(m, f, &fd);
    if (st != SL_STATUS_OK)
      return st;
    uint64_t a = ph + c->dst_off, b = a + c->row_bytes, foff = file_off_of(m, c);
    uint64_t lo, hi;
    if (!interior(m->page, a, c->row_bytes, &lo, &hi)) {
      st = read_edge(m, fd, f, base + a, b - a, foff);
    } else {
      /* Private: writes copy the page and never reach the file. */
      void *p = mmap(base + lo, (size_t)(hi - lo), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, fd, (off_t)(foff + (lo - a)));
      if (p == MAP_FAILED)
        return sl__err_set(m->err, errno == ENOMEM ? SL_STATUS_NOMEM : SL_STATUS_IO,
                           "cannot map %llu bytes of %s at offset %llu: %s", (unsigned long long)(hi - lo),
                           m->cat->files[f].path, (unsigned long long)(foff + (lo - a)), strerror(errno));
      /* No read-around on faults: an uncached page of a file mapping otherwise pulls in a window
       * of the device's read-ahead around it (128 KiB and more), i.e. other ranks' bytes, which
       * on shared storage are reads the plan never made. The populate asks for exactly the
       * mapped range instead (sl__filemap_populate). */
      (void)madvise(p, (size_t)(hi - lo), MADV_RANDOM);
      m->out->bytes_mapped += hi - lo;
      st = read_edge(m, fd, f, base + a, lo - a, foff);
      if (st == SL_STATUS_OK)
        st = read_edge(m, fd, f, base + hi, b - hi, foff + (hi - a));
    }
    if (st != SL_STATUS_OK)
      return st;
  }
  *ptr = base + ph;
  return SL_STATUS_OK;
}

void sl__filemaps_free(sl__filemaps *m) {
  for (size_t r = 0; m->regions != NULL && r < m->n_regions; r++)
    munmap(m->regions[r].base, m->regions[r].len);
  free(m->regions);
  memset(m, 0, sizeof *m);
}

/* Half of vm.max_map_count (65530 by default) for parameter mappings: the rest of the process
 * (libraries, MPI, allocations) keeps the other half. */
static uint64_t mapping_budget(void) {
  uint64_t limit = 65530;
  FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
  if (f != NULL) {
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) == 1 && v > 0)
      limit = v;
    fclose(f);
  }
  return limit / 2;
}

sl_status sl__filemap_params(const sl__catalog *cat, const sl__schedule *s, const sl__rank_plan *plan,
                             const bool *skip, sl__strategy strategy, sl__file_table *files, void **param_ptr,
                             bool *mapped, sl__filemaps *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  size_t n = plan->n_lparams;
  mapper m = {.cat = cat,
              .s = s,
              .plan = plan,
              .files = files,
              .first = calloc(n + 2, sizeof(uint32_t)),
              .list = calloc(plan->n_copies + 1, sizeof(uint32_t)),
              .per_piece = calloc(s->n_pieces + 1, sizeof(uint32_t)),
              .fds = malloc((cat->n_files + 1) * sizeof(int)),
              .cold_direct = strategy == SL_STRATEGY_AUTO,
              .direct = malloc(cat->n_files + 1),
              .page = (uint64_t)sysconf(_SC_PAGESIZE),
              .vmas_left = mapping_budget(),
              .out = out,
              .err = err};
  out->regions = calloc(n + 1, sizeof *out->regions);
  sl_status st = SL_STATUS_OK;
  if (m.first == NULL || m.list == NULL || m.per_piece == NULL || m.fds == NULL || m.direct == NULL ||
      out->regions == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory mapping parameters");
    goto done;
  }
  for (size_t f = 0; f < cat->n_files; f++) {
    m.fds[f] = -1;
    m.direct[f] = -1;
  }
  for (size_t c = 0; c < plan->n_copies; c++) {
    m.first[plan->copies[c].lparam + 1]++;
    if (plan->copies[c].piece != SL_NONE)
      m.per_piece[plan->copies[c].piece]++;
  }
  for (size_t i = 0; i < n; i++)
    m.first[i + 1] += m.first[i];
  uint32_t *cursor = malloc((n + 1) * sizeof *cursor);
  if (cursor == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory mapping parameters");
    goto done;
  }
  memcpy(cursor, m.first, (n + 1) * sizeof *cursor);
  for (size_t c = 0; c < plan->n_copies; c++)
    m.list[cursor[plan->copies[c].lparam]++] = (uint32_t)c;
  free(cursor);
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    uint64_t ph = 0, vmas = 0;
    bool keep = true;
    if (!eligible(&m, i, skip, &ph, &vmas) || vmas > m.vmas_left)
      continue;
    if (m.cold_direct && (st = keep_mapping(&m, i, &keep)) != SL_STATUS_OK)
      break;
    if (!keep)
      continue;
    m.vmas_left -= vmas;
    st = map_param(&m, i, ph, &param_ptr[i]);
    if (st == SL_STATUS_OK) {
      mapped[i] = true;
      out->params_mapped++;
    }
  }
  if (st != SL_STATUS_OK) {
    for (size_t i = 0; i < n; i++) {
      if (mapped[i])
        param_ptr[i] = NULL;
      mapped[i] = false;
    }
    sl__filemaps_free(out);
  }
done:
  for (size_t f = 0; m.fds != NULL && files == NULL && f < cat->n_files; f++) /* the table's stay open */
    if (m.fds[f] >= 0)
      close(m.fds[f]);
  free(m.first);
  free(m.list);
  free(m.per_piece);
  free(m.fds);
  free(m.direct);
  if (st != SL_STATUS_OK && out->regions != NULL)
    sl__filemaps_free(out);
  return st;
}

/* The kernel's default read-ahead window (VM_READAHEAD_PAGES): one MADV_WILLNEED request reads
 * at most the larger of the device's window and its optimal I/O size, never less than this. */
#define SL_FILEMAP_PREFETCH_BYTES ((size_t)128 << 10)

sl_status sl__filemap_populate(const void *p, uint64_t len, const char *path, uint64_t off, sl__err *err) {
  if (len == 0)
    return SL_STATUS_OK;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)p;
  uintptr_t lo = a - a % page;
  size_t n = (size_t)(a + len - lo);
  /* The mapping reads nothing around a fault (map_param): ask the kernel to read exactly this
   * range first, in steps no larger than the smallest read-ahead window it honours per request,
   * so the reads stay large and no page outside the range is read. */
  for (size_t k = 0; k < n; k += SL_FILEMAP_PREFETCH_BYTES)
    (void)madvise((void *)(lo + k), n - k < SL_FILEMAP_PREFETCH_BYTES ? n - k : SL_FILEMAP_PREFETCH_BYTES,
                  MADV_WILLNEED);
#ifdef MADV_POPULATE_READ
  /* One call faults the whole range in (reading it from storage where it is not cached) and
   * reports an I/O error as EFAULT instead of a SIGBUS on a later access. */
  if (madvise((void *)lo, n, MADV_POPULATE_READ) == 0)
    return SL_STATUS_OK;
  if (errno != EINVAL)
    return sl__err_set(err, SL_STATUS_IO, "read of %s at offset %llu (%llu bytes, mapped) failed: %s", path,
                       (unsigned long long)off, (unsigned long long)len,
                       errno == EFAULT ? "I/O error or file truncated" : strerror(errno));
#endif
  /* Kernels before 5.14: touch one byte per page (read-ahead brings the rest). */
  volatile const uint8_t *b = (volatile const uint8_t *)lo;
  uint8_t sink = 0;
  for (size_t k = 0; k < n; k += (size_t)page)
    sink ^= b[k];
  (void)sink;
  return SL_STATUS_OK;
}
