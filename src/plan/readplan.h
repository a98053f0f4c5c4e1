/*
 * plan/readplan.h — how the pieces a rank reads become read operations: a contiguous piece is cut
 * into chunks; a strided piece (a row-parallel slice) is read as one covering range per chunk
 * when its gaps are small (plan/plan.h: sl__piece_covering), else row by row; consecutive operations
 * that touch are merged. Each operation carries its deliveries: which packed bytes of which piece
 * it holds, and whether they go to local parameters or to a broadcast bucket. Pure arithmetic,
 * shared by the transfer engine and its unit tests.
 */
#ifndef SL_READPLAN_H
#define SL_READPLAN_H

#include "model/catalog.h"
#include "plan/plan.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl__delivery {
  uint32_t piece;      /* SL_NONE: whole rows of a two-phase exchange (p0, p1: file offsets) */
  uint64_t p0, p1;     /* packed byte range [p0, p1) of the piece */
  uint32_t bucket;     /* the rank's bucket index, or SL_NONE for local copies */
  uint64_t bucket_off; /* bucket byte of packed byte p0 */
} sl__delivery;

typedef struct sl__read_op {
  uint32_t file;
  uint64_t offset; /* absolute file offset */
  uint64_t len;    /* bytes read (all rows of a row run) */
  uint32_t rows;   /* 1, or a row run: `rows` reads of len / rows bytes, `stride` apart in the file,
                      landing packed (one after the other) in the buffer; one delivery of whole rows */
  uint64_t stride;
  uint64_t useful;       /* bytes delivered (len - useful = covering bytes) */
  uint32_t first, count; /* deliveries */
  uint32_t bucket;       /* bucket index, or SL_NONE */
  void *direct_dst;      /* non-NULL: read straight into this host memory (one delivery) */
  bool populate;         /* direct_dst is a mapping of these file bytes: make it resident, no read */
} sl__read_op;

typedef struct sl__readplan {
  sl__vec ops;  /* sl__read_op */
  sl__vec dels; /* sl__delivery */
} sl__readplan;

void sl__readplan_init(sl__readplan *rp);
void sl__readplan_free(sl__readplan *rp);

/* Adds the operations reading packed range [p0, p1) of piece P (index `piece`, tensor T).
 * direct: host address of the piece's packed byte 0 in its single contiguous destination, or
 * NULL (then bytes go through staging). row_runs: whole rows read one by one (a strided piece that
 * is not covered) become row runs of up to a chunk each instead of one operation per row, so that
 * the plan's size follows the bytes, not the row count (not for O_DIRECT, whose reads must each be
 * widened to blocks). */
sl_status sl__readplan_piece(sl__readplan *rp, const sl__piece *P, uint32_t piece, const sl__cat_tensor *T,
                             uint64_t p0, uint64_t p1, uint32_t bucket, uint64_t bucket_off, uint8_t *direct,
                             uint64_t chunk, uint64_t coalesce_gap, bool row_runs, sl__err *err);

/* Adds the operations reading file bytes [off, off + len) of file `file` whole, in chunks, into
 * bucket `bucket` from bucket_off on (the rows a rank reads in a two-phase exchange round). */
sl_status sl__readplan_range(sl__readplan *rp, uint32_t file, uint64_t off, uint64_t len, uint32_t bucket,
                             uint64_t bucket_off, uint64_t chunk, sl__err *err);

/* Source position (bytes from the tensor's first byte) of packed byte p of piece P. */
uint64_t sl__src_of(const sl__piece *P, uint64_t p);

/* Segments of a packed byte range [p0, p1) of a piece with rows of row_bytes: a partial first
 * row, a block of whole rows, a partial last row (at most 3). */
typedef struct sl__segment {
  uint64_t row;  /* first row */
  uint64_t col;  /* byte offset in the row */
  uint64_t len;  /* bytes per row */
  uint64_t rows; /* rows in this segment */
} sl__segment;
int sl__segments(uint64_t row_bytes, uint64_t p0, uint64_t p1, sl__segment out[3]);

/* O_DIRECT: the aligned range covering [off, off + len). */
void sl__readplan_widen(uint64_t off, uint64_t len, uint64_t align, uint64_t *woff, uint64_t *wlen);

/* Copies the packed bytes of delivery d out of buf, which holds file bytes from file offset
 * buf_off (tensor T's data starts at T->offset), into out (d->p1 - d->p0 bytes). */
void sl__readplan_extract(const sl__piece *P, const sl__cat_tensor *T, const sl__delivery *d,
                          const uint8_t *buf, uint64_t buf_off, uint8_t *out);

#endif
