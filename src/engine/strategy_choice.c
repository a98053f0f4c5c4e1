/*
 * engine/strategy_choice.c — the per-file strategy decision and its words (see
 * engine/strategy_choice.h).
 */
#include "engine/strategy_choice.h"

#include <stdio.h>
#include <string.h>

const char *sl__strategy_name(sl__strategy s) {
  switch (s) {
  case SL_STRATEGY_DIRECT:
    return "direct";
  case SL_STRATEGY_IO_URING:
    return "io_uring";
  case SL_STRATEGY_MMAP:
    return "mmap";
  case SL_STRATEGY_AUTO:
    break;
  }
  return "auto";
}

bool sl__strategy_maps(sl__strategy s, bool host, bool prefault) {
  return host && (s == SL_STRATEGY_MMAP || (s == SL_STRATEGY_AUTO && !prefault));
}

static bool half_resident(uint64_t resident, uint64_t pages) {
  return resident * SL_CHOICE_RESIDENT_DEN >= pages * SL_CHOICE_RESIDENT_NUM;
}

static bool mostly_resident(const sl__choice_in *in) {
  return half_resident(in->rest_resident, in->rest_pages);
}

bool sl__strategy_map_param(uint64_t nbytes, uint64_t pages, uint64_t resident, bool resident_known,
                            bool o_direct) {
  return nbytes < SL_CHOICE_MIN_READ || !resident_known || !o_direct || half_resident(resident, pages);
}

/* O_DIRECT's alignment costs little and its reads are large. */
static bool direct_pays(const sl__choice_in *in) {
  uint64_t rest = in->bytes - in->bytes_mapped;
  uint64_t reads = in->direct_reads > 0 ? in->direct_reads : 1;
  return in->direct_extra <= rest / SL_CHOICE_EXTRA_DEN && rest / reads >= SL_CHOICE_MIN_READ;
}

void sl__strategy_decide(sl__file_choice *c) {
  const sl__choice_in *in = &c->in;
  c->direct = false;
  c->why = SL_WHY_EXPLICIT;
  switch (in->strategy) {
  case SL_STRATEGY_DIRECT:
  case SL_STRATEGY_IO_URING:
    c->direct = in->o_direct;
    c->why = in->o_direct ? SL_WHY_EXPLICIT : SL_WHY_NO_O_DIRECT;
    return;
  case SL_STRATEGY_MMAP:
    return;
  case SL_STRATEGY_AUTO:
    break;
  }
  if (in->bytes_mapped >= in->bytes)
    c->why = SL_WHY_ALL_MAPPED;
  else if (!in->resident_known)
    c->why = SL_WHY_UNKNOWN;
  else if (mostly_resident(in))
    c->why = SL_WHY_RESIDENT;
  else if (!in->o_direct)
    c->why = SL_WHY_NO_O_DIRECT;
  else if (!direct_pays(in))
    c->why = SL_WHY_SMALL_READS;
  else {
    c->direct = true;
    c->why = SL_WHY_COLD;
  }
}

const char *sl__choice_label(const sl__file_choice *c) {
  if (c->in.bytes_mapped > 0)
    return c->in.bytes_mapped >= c->in.bytes ? "mmap" : c->direct ? "mmap+direct" : "mmap+buffered";
  if (c->direct)
    return c->in.strategy == SL_STRATEGY_IO_URING ? "io_uring" : "direct";
  return "buffered";
}

static unsigned percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 100u : (unsigned)((part * 100 + whole / 2) / whole);
}

double sl__choice_resident(const sl__file_choice *c) {
  return c->in.pages == 0 ? 1.0 : (double)c->in.resident / (double)c->in.pages;
}

static void main_reason(const sl__file_choice *c, char *out, size_t cap) {
  const sl__choice_in *in = &c->in;
  uint64_t rest = in->bytes - in->bytes_mapped;
  char head[160];
  if (in->bytes_mapped > 0 && rest > 0)
    snprintf(head, sizeof head,
             "host destination: %u%% of the bytes are mapped parameters (no copy); the rest is ",
             percent(in->bytes_mapped, in->bytes));
  else
    snprintf(head, sizeof head, "%s destination: the bytes read are ", in->host ? "host" : "device");
  unsigned res = percent(in->rest_resident, in->rest_pages);
  const char *name = sl__strategy_name(in->strategy);
  switch (c->why) {
  case SL_WHY_EXPLICIT:
    snprintf(out, cap, "load_strategy %s", name);
    return;
  case SL_WHY_ALL_MAPPED:
    snprintf(out, cap,
             "host destination: every parameter read from this file is a mapping of its pages (no copy); "
             "%u%% were in the page cache",
             percent(in->resident, in->pages));
    return;
  case SL_WHY_RESIDENT:
    snprintf(out, cap, "%s%u%% in the page cache: read through it", head, res);
    return;
  case SL_WHY_COLD: {
    char note[128] = "";
    if (in->maps && in->strategy == SL_STRATEGY_AUTO)
      snprintf(note, sizeof note,
               " (cold parameters of %u KiB or more are not mapped: O_DIRECT into them is faster)",
               SL_CHOICE_MIN_READ / 1024u);
    snprintf(out, cap, "%s%u%% in the page cache and the file system accepts O_DIRECT: read with O_DIRECT%s",
             head, res, note);
    return;
  }
  case SL_WHY_NO_O_DIRECT:
    if (in->strategy != SL_STRATEGY_AUTO)
      snprintf(out, cap,
               "load_strategy %s, but the file system refuses O_DIRECT: read through the page cache", name);
    else
      snprintf(out, cap,
               "%s%u%% in the page cache, but the file system refuses O_DIRECT: read through the page cache",
               head, res);
    return;
  case SL_WHY_SMALL_READS:
    snprintf(out, cap,
             "%s%u%% in the page cache, but O_DIRECT would add %u%% of alignment to reads of %llu KiB on "
             "average: read through the page cache",
             head, res, percent(in->direct_extra, rest),
             (unsigned long long)(rest / (in->direct_reads > 0 ? in->direct_reads : 1) / 1024));
    return;
  case SL_WHY_UNKNOWN:
    snprintf(out, cap, "the page cache could not be asked what it holds: read through it");
    return;
  }
}

void sl__choice_reason(const sl__file_choice *c, char *out, size_t cap) {
  if (cap == 0)
    return;
  out[0] = '\0';
  main_reason(c, out, cap);
  size_t n = strlen(out);
  bool page_cache = !c->direct && c->in.bytes_mapped < c->in.bytes;
  if (page_cache && !c->in.read_ahead && n + 1 < cap)
    snprintf(out + n, cap - n,
             ", without read-ahead (ranks on several nodes: it would pull other nodes' bytes)");
}
