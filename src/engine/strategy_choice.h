/*
 * engine/strategy_choice.h — how each checkpoint file is read, and why: the decision of
 * `load_strategy auto`, and the same record for the explicit strategies (which decide nothing).
 *
 * What auto knows about each file this rank reads (engine/file_choice.c measures it):
 *   - the destination: host parameters built from file ranges this rank alone reads are mappings
 *     of the page cache (engine/filemap.h) — no copy and no fresh memory, the fastest way warm —
 *     unless they are cold and large on a file system that takes O_DIRECT: O_DIRECT into the
 *     parameter is the faster way cold (docs/PERFORMANCE.md, "What auto chooses and why");
 *   - for the other bytes (device parameters, row-parallel slices, broadcast buckets): how much of
 *     them is in the page cache (cachestat(2), or mincore(2) on a mapping), whether the file
 *     system accepts O_DIRECT, and what O_DIRECT's alignment would cost (bytes added, read sizes).
 * Resident bytes are read through the page cache; cold ones with O_DIRECT when the reads are
 * large and aligned enough, else through the page cache.
 *
 * Pure: the decision and its words are functions of their inputs (tests/unit/test_strategy_choice.c).
 */
#ifndef SL_STRATEGY_CHOICE_H
#define SL_STRATEGY_CHOICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* auto: chosen per file (below): on host without prefault, the parameters mmap
 * would map are mapped; the other bytes go through the page cache where resident, else O_DIRECT
 * when its reads are large. mmap: host parameters whose bytes are one contiguous range of a file
 * this rank alone reads are private mappings of that file (no copy, no fresh memory); everything
 * else is read through the page cache. direct, io_uring: O_DIRECT for every file that takes it. */
typedef enum sl__strategy {
  SL_STRATEGY_AUTO = 0,
  SL_STRATEGY_DIRECT,
  SL_STRATEGY_IO_URING,
  SL_STRATEGY_MMAP
} sl__strategy;
/* The strategy's configuration value ("auto", "direct", "io_uring", "mmap"). */
const char *sl__strategy_name(sl__strategy s);

/* The other bytes are read through the page cache when at least this share of their pages is
 * resident (numerator / denominator). */
#define SL_CHOICE_RESIDENT_NUM 1u
#define SL_CHOICE_RESIDENT_DEN 2u
/* O_DIRECT is worth it only when its alignment adds at most 1/SL_CHOICE_EXTRA_DEN of the bytes ... */
#define SL_CHOICE_EXTRA_DEN 16u
/* ... and its reads average at least this many bytes. */
#define SL_CHOICE_MIN_READ (256u * 1024u)

typedef enum sl__choice_why {
  SL_WHY_EXPLICIT = 0, /* load_strategy named the strategy */
  SL_WHY_ALL_MAPPED,   /* every byte read from the file is a mapped parameter: nothing is copied */
  SL_WHY_RESIDENT,     /* the other bytes are mostly in the page cache */
  SL_WHY_COLD,         /* the other bytes are mostly not cached; O_DIRECT accepted, reads large */
  SL_WHY_NO_O_DIRECT,  /* O_DIRECT wanted, but the file system refuses it */
  SL_WHY_SMALL_READS,  /* mostly not cached, but O_DIRECT would widen small or unaligned reads */
  SL_WHY_UNKNOWN       /* the page cache could not be asked: through the page cache */
} sl__choice_why;

typedef struct sl__choice_in {
  sl__strategy strategy;
  bool host;                          /* the destination is host memory (else a device) */
  bool maps;                          /* host parameters may be mappings (sl__strategy_maps) */
  uint64_t bytes;                     /* bytes of the file this rank reads */
  uint64_t bytes_mapped;              /* of them: mapped parameters (populated in place, never copied) */
  bool resident_known;                /* the page cache answered */
  uint64_t pages, resident;           /* pages of everything read, and how many are in the page cache */
  uint64_t rest_pages, rest_resident; /* the same for the bytes not mapped */
  bool o_direct;                      /* the file system accepts O_DIRECT (assumed until refused) */
  uint64_t direct_extra;              /* bytes O_DIRECT's alignment would add to the bytes not mapped */
  uint64_t direct_reads;              /* reads those bytes take with O_DIRECT */
  bool read_ahead;                    /* the descriptor keeps the kernel's read-ahead (one node) */
} sl__choice_in;

typedef struct sl__file_choice {
  sl__choice_in in;
  bool direct; /* the bytes not mapped are read with O_DIRECT (aligned, through staging) */
  sl__choice_why why;
} sl__file_choice;

/* Whether host parameters made of file ranges this rank alone reads become mappings of the page
 * cache: the mmap strategy, and auto on host without prefault (prefault asks for ordinary,
 * pre-touched parameter memory). */
bool sl__strategy_maps(sl__strategy s, bool host, bool prefault);

/* Under auto, whether a host parameter that can be a mapping becomes one: yes unless it is at
 * least SL_CHOICE_MIN_READ bytes, less than SL_CHOICE_RESIDENT of its `pages` are `resident`
 * (resident_known: the page cache answered) and its file system takes O_DIRECT. A cold mapping is
 * filled through the page cache; O_DIRECT straight into the parameter is faster cold
 * (docs/PERFORMANCE.md §11), and a warm mapping costs no copy at all. */
bool sl__strategy_map_param(uint64_t nbytes, uint64_t pages, uint64_t resident, bool resident_known,
                            bool o_direct);

/* The decision for one file: sets c->direct and c->why from c->in. */
void sl__strategy_decide(sl__file_choice *c);

/* "mmap", "mmap+buffered", "mmap+direct", "buffered", "direct" or "io_uring". */
const char *sl__choice_label(const sl__file_choice *c);

/* One sentence saying why (the report's "reason"), into out (cap bytes, always terminated); it
 * ends by saying so where bytes go through the page cache without read-ahead (ranks on several
 * nodes: engine/reads.c). */
void sl__choice_reason(const sl__file_choice *c, char *out, size_t cap);

/* Share of the pages read that were resident, 0..1 (1 when nothing was read). */
double sl__choice_resident(const sl__file_choice *c);

#endif
