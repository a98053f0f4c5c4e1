/*
 * plan/timemodel.c — the predicted load time of plan/stats.h (sl__figures_predict), a pure
 * function of the schedule, the files' offsets, the bandwidths and the node layout.
 *
 * Storage: a node pulls whole blocks (SL_STORAGE_BLOCK_BYTES) from storage. Row slices of several
 * of its ranks that share rows (tensor-parallel column slices side by side) are merged first, and
 * when the gap between one row's slice and the next row's is under a block, every block between
 * is touched: the node reads the span. Row slices narrower than a block on different nodes thus
 * both pull the shared blocks, which is what a network file system carries.
 *
 * A two-phase exchange (plan/twophase.h) is read as its members read it: each member a contiguous
 * block of whole rows; its column pieces are not read as such.
 *
 * Network: only traffic between nodes counts (a group within one node uses shared memory). The
 * buckets are broadcast one after another in one global order, each a collective of its group; a
 * root sends ceil(log2 n) copies of a bucket spread over n nodes (a binomial tree), and every node
 * of the group waits for it. An exchange round is an all-to-all instead: every member sends every
 * other member that member's columns of its rows, so a node sends and receives at once, and the
 * round lasts as long as the larger of the two over the node's link. A node's broadcast time is
 * the sum over the buckets it takes part in; the busiest node's time is added to the slowest
 * node's storage time (a root reads a bucket before it sends it, and reads and broadcasts share
 * the node's link).
 */
#include "plan/stats.h"
#include "plan/twophase.h"

#include <stdlib.h>
#include <string.h>

/* A run: the same column range [c0, c1) of `rows` rows `stride` apart from file offset base; or a
 * contiguous range (stride 0, rows 1). */
typedef struct run {
  uint32_t node;
  uint32_t file;
  uint64_t base, stride, rows, c0, c1;
} run;

static int run_cmp(const void *pa, const void *pb) {
  const run *a = pa;
  const run *b = pb;
#define CMP(x)                                                                                               \
  if (a->x != b->x)                                                                                          \
    return a->x < b->x ? -1 : 1;
  CMP(node)
  CMP(file)
  CMP(stride)
  CMP(rows)
  CMP(base)
  CMP(c0)
#undef CMP
  return 0;
}

static uint64_t blocks_of(uint64_t lo, uint64_t hi, uint64_t B) {
  return hi > lo ? (hi + B - 1) / B - lo / B : 0;
}

/* Bytes of the blocks one merged run touches. */
static uint64_t run_blocks(const run *r, uint64_t B) {
  uint64_t w = r->c1 - r->c0;
  if (r->stride == 0 || r->rows <= 1 || r->stride - w < B)
    return B * blocks_of(r->base + r->c0, r->base + (r->rows - 1) * r->stride + r->c1, B);
  if (r->stride % B == 0) /* every row at the same alignment */
    return B * r->rows * blocks_of(r->base + r->c0, r->base + r->c1, B);
  /* Rows at varying alignments: count a sample exactly and scale (a huge tensor stays cheap). */
  uint64_t n = r->rows < 4096 ? r->rows : 4096;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; i++)
    sum += blocks_of(r->base + i * r->stride + r->c0, r->base + i * r->stride + r->c1, B);
  return (uint64_t)((long double)B * sum * r->rows / n);
}

/* Per node: the storage blocks its readers' pieces touch. Only row slices (strided runs) merge
 * with others, so contiguous ranges are counted at once and only the strided runs are sorted. */
static sl_status storage_blocks(sl__figures *f, const sl__schedule *s, const sl__catalog *cat,
                                const sl__node_layout *l, sl__err *err) {
  run *runs = calloc(s->n_pieces + 1, sizeof *runs);
  if (runs == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory in the time model");
  size_t n_runs = 0;
  uint64_t B = f->block;
  /* Exchanges: each member's block of whole rows, one contiguous range. */
  for (size_t x = 0; x < s->n_xchgs; x++) {
    const sl__xchg *X = &s->xchgs[x];
    const sl__group *g = &s->groups[X->group];
    const sl__cat_tensor *t = &cat->tensors[X->tensor];
    for (uint32_t m = 0; m < g->n; m++) {
      uint64_t lo = 0, hi = 0;
      sl__xchg_rows(X, g->n, m, UINT64_MAX, &lo, &hi);
      uint64_t base = t->offset + X->src_off + lo * X->row_bytes;
      if (hi > lo)
        f->nodes[sl__node_layout_of(l, s->group_members[g->off + m])].storage +=
            B * blocks_of(base, base + (hi - lo) * X->row_bytes, B);
    }
  }
  for (size_t k = 0; k < s->n_pieces; k++) {
    const sl__piece *P = &s->pieces[k];
    if (P->xchg != SL_NONE)
      continue; /* read as whole rows, above */
    const sl__cat_tensor *t = &cat->tensors[P->tensor];
    uint32_t node = sl__node_layout_of(l, P->reader);
    if (P->rows <= 1 || P->src_stride == P->row_bytes) {
      uint64_t base = t->offset + P->src_off;
      f->nodes[node].storage += B * blocks_of(base, base + P->nbytes, B);
    } else {
      uint64_t col = P->src_off % P->src_stride;
      runs[n_runs++] = (run){.node = node,
                             .file = t->file,
                             .base = t->offset + P->src_off - col,
                             .stride = P->src_stride,
                             .rows = P->rows,
                             .c0 = col,
                             .c1 = col + P->row_bytes};
    }
  }
  qsort(runs, n_runs, sizeof *runs, run_cmp);
  for (size_t i = 0; i < n_runs;) {
    run m = runs[i++];
    /* Column slices of the same rows on the same node, gaps under a block: one run. */
    while (i < n_runs && runs[i].node == m.node && runs[i].file == m.file && runs[i].stride == m.stride &&
           runs[i].rows == m.rows && runs[i].base == m.base && m.stride != 0 && runs[i].c0 <= m.c1 + B) {
      m.c1 = runs[i].c1 > m.c1 ? runs[i].c1 : m.c1;
      i++;
    }
    f->nodes[m.node].storage += run_blocks(&m, B);
  }
  free(runs);
  return SL_STATUS_OK;
}

/* Scratch of the network model, per node, zero between uses. */
typedef struct net_scratch {
  uint32_t *seen;       /* stamp + 1 of the group or exchange that listed the node */
  uint32_t *list;       /* the nodes of the current group or exchange */
  uint32_t *cnt[2];     /* an exchange's members on the node with a short, a long block of rows */
  uint64_t *gnodes_off; /* per group (+ 1): its distinct nodes at gnodes[..] */
  uint32_t *gnodes;
} net_scratch;

/* The distinct nodes of every group, in member order: a bucket then costs its nodes, not its ranks. */
static bool group_nodes(const sl__schedule *s, const sl__node_layout *l, net_scratch *ns) {
  uint64_t total = 0;
  for (size_t g = 0; g < s->n_groups; g++)
    total += s->groups[g].n;
  ns->gnodes_off = calloc(s->n_groups + 1, sizeof *ns->gnodes_off);
  ns->gnodes = calloc(total + 1, sizeof *ns->gnodes);
  if (ns->gnodes_off == NULL || ns->gnodes == NULL)
    return false;
  uint64_t len = 0;
  for (size_t g = 0; g < s->n_groups; g++) {
    const sl__group *G = &s->groups[g];
    for (uint32_t j = 0; j < G->n; j++) {
      uint32_t node = sl__node_layout_of(l, s->group_members[G->off + j]);
      if (ns->seen[node] != g + 1) {
        ns->seen[node] = (uint32_t)g + 1;
        ns->gnodes[len++] = node;
      }
    }
    ns->gnodes_off[g + 1] = len;
  }
  return true;
}

/* Rows of member m's block in an exchange among n: rows / n, or one more for (rows % n) members. */
static int long_block(const sl__xchg *X, uint32_t n, uint32_t m) {
  uint64_t r = X->rows % n;
  return r * (m + 1) / n - r * m / n != 0;
}

/* Counts an exchange's members per node by block length (sl__xchg_rows: a member's rows in a round
 * depend only on its block's length); returns the number of nodes listed. */
static uint32_t exchange_nodes(const sl__schedule *s, const sl__xchg *X, const sl__node_layout *l,
                               uint32_t stamp, net_scratch *ns) {
  const sl__group *g = &s->groups[X->group];
  uint32_t n_nodes = 0;
  for (uint32_t m = 0; m < g->n; m++) {
    uint32_t node = sl__node_layout_of(l, s->group_members[g->off + m]);
    if (ns->seen[node] != stamp) {
      ns->seen[node] = stamp;
      ns->cnt[0][node] = ns->cnt[1][node] = 0;
      ns->list[n_nodes++] = node;
    }
    ns->cnt[long_block(X, g->n, m)][node]++;
  }
  return n_nodes;
}

/* One exchange round over the nodes: member m sends member r (r != m) its rows of r's column
 * block; what crosses between nodes counts, and each node of the group waits for the larger of
 * what it sends and receives. In closed form, linear in the group's nodes (groups of replicas span
 * thousands of ranks): member m sends its bytes to every member off its node, n - members[node(m)]
 * of them, and member r receives every byte sent from other nodes, total - bytes[node(r)]. A
 * member's bytes in the round depend only on its block's length, so a node's sums come from its
 * counts of short and long blocks (exchange_nodes). */
static void exchange_round(sl__figures *f, const sl__schedule *s, const sl__bucket *bk, uint32_t n_nodes,
                           const net_scratch *ns) {
  const sl__xchg *X = &s->xchgs[bk->xchg];
  uint32_t n = s->groups[bk->group].n;
  uint64_t bytes[2];
  uint64_t members[2] = {0, 0};
  for (int b = 0; b < 2; b++) { /* the rows of the round, as sl__xchg_rows cuts them */
    uint64_t len = X->rows / n + (uint64_t)b;
    uint64_t k = bk->round;
    uint64_t q = X->rows_per_round;
    uint64_t done = k < len / q + 1 ? k * q : len;
    done = done < len ? done : len;
    bytes[b] = (len - done > q ? q : len - done) * X->col_bytes;
  }
  for (uint32_t i = 0; i < n_nodes; i++) {
    members[0] += ns->cnt[0][ns->list[i]];
    members[1] += ns->cnt[1][ns->list[i]];
  }
  uint64_t total = members[0] * bytes[0] + members[1] * bytes[1];
  double rate = f->network_gbps * 1e9;
  for (uint32_t i = 0; i < n_nodes; i++) {
    uint32_t node = ns->list[i];
    uint64_t cnt = ns->cnt[0][node] + ns->cnt[1][node];
    uint64_t sum = ns->cnt[0][node] * bytes[0] + ns->cnt[1][node] * bytes[1];
    uint64_t out = sum * (n - cnt);
    uint64_t in = cnt * (total - sum);
    if (out == 0 && in == 0)
      continue; /* nothing crossed its link */
    uint64_t most = out > in ? out : in;
    f->nodes[node].net_out += out;
    f->nodes[node].net_in += in;
    f->nodes[node].bcast_s += rate > 0 ? (double)most / rate : 0;
  }
}

static void net_scratch_free(net_scratch *ns) {
  free(ns->seen);
  free(ns->list);
  free(ns->cnt[0]);
  free(ns->cnt[1]);
  free(ns->gnodes_off);
  free(ns->gnodes);
}

/* Per node: broadcast bytes in and out over its link, and the seconds of the buckets it is in. */
static sl_status broadcasts(sl__figures *f, const sl__schedule *s, const sl__node_layout *l, sl__err *err) {
  net_scratch ns = {
      .seen = calloc(f->n_nodes + 1, sizeof *ns.seen),
      .list = calloc(f->n_nodes + 1, sizeof *ns.list),
      .cnt = {calloc(f->n_nodes + 1, sizeof(uint32_t)), calloc(f->n_nodes + 1, sizeof(uint32_t))}};
  if (ns.seen == NULL || ns.list == NULL || ns.cnt[0] == NULL || ns.cnt[1] == NULL ||
      !group_nodes(s, l, &ns)) {
    net_scratch_free(&ns);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory in the time model");
  }
  double rate = f->network_gbps * 1e9;
  uint32_t xchg = SL_NONE; /* the exchange whose nodes are listed (its rounds are consecutive buckets) */
  uint32_t x_nodes = 0;
  for (size_t b = 0; b < s->n_buckets; b++) {
    const sl__bucket *bk = &s->buckets[b];
    if (bk->xchg != SL_NONE) {
      if (bk->xchg != xchg) { /* stamps after the groups' */
        xchg = bk->xchg;
        x_nodes = exchange_nodes(s, &s->xchgs[xchg], l, (uint32_t)(s->n_groups + 1 + xchg), &ns);
      }
      exchange_round(f, s, bk, x_nodes, &ns);
      continue;
    }
    const uint32_t *list = &ns.gnodes[ns.gnodes_off[bk->group]];
    uint32_t n = (uint32_t)(ns.gnodes_off[bk->group + 1] - ns.gnodes_off[bk->group]);
    if (n <= 1)
      continue; /* within one node: shared memory */
    uint32_t root = sl__node_layout_of(l, bk->reader);
    uint32_t copies = 0; /* ceil(log2 n): the levels of a binomial tree */
    while ((1u << copies) < n)
      copies++;
    double sec = rate > 0 ? (double)copies * (double)bk->nbytes / rate : 0;
    f->nodes[root].net_out += bk->nbytes * (uint64_t)(n - 1);
    for (uint32_t j = 0; j < n; j++) {
      if (list[j] != root)
        f->nodes[list[j]].net_in += bk->nbytes;
      f->nodes[list[j]].bcast_s += sec;
    }
  }
  net_scratch_free(&ns);
  return SL_STATUS_OK;
}

void sl__figures_free(sl__figures *f) {
  free(f->nodes);
  f->nodes = NULL;
  f->n_nodes = 0;
}

sl_status sl__figures_predict(sl__figures *f, const sl_rank_stats *stats, const sl__schedule *sched,
                              const sl__catalog *cat, const sl__node_layout *layout, sl__err *err) {
  sl__figures_free(f);
  uint32_t rpn = layout->ranks_per_node > 0 ? layout->ranks_per_node : 1;
  f->n_nodes = layout->node_of != NULL ? layout->n_nodes : (f->world + rpn - 1) / rpn;
  f->ranks_per_node = rpn;
  f->hosts = layout->hosts;
  f->nodes_from_job = layout->from_job;
  f->block = SL_STORAGE_BLOCK_BYTES;
  f->nodes = calloc(f->n_nodes + 1, sizeof *f->nodes);
  if (f->nodes == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory in the time model");
  for (uint32_t r = 0; r < f->world; r++) {
    sl__node_figures *n = &f->nodes[sl__node_layout_of(layout, r)];
    n->ranks++;
    n->read += stats[r].bytes_read;
    n->received += stats[r].bytes_received;
    n->sent += stats[r].bytes_sent;
  }
  sl_status st = storage_blocks(f, sched, cat, layout, err);
  if (st == SL_STATUS_OK)
    st = broadcasts(f, sched, layout, err);
  if (st != SL_STATUS_OK) {
    sl__figures_free(f);
    return st;
  }
  f->predicted_read_s = 0;
  f->predicted_bcast_s = 0;
  for (uint32_t i = 0; i < f->n_nodes; i++) {
    sl__node_figures *n = &f->nodes[i];
    n->read_s = f->storage_gbps > 0 ? (double)n->storage / (f->storage_gbps * 1e9) : 0;
    f->predicted_read_s = n->read_s > f->predicted_read_s ? n->read_s : f->predicted_read_s;
    f->predicted_bcast_s = n->bcast_s > f->predicted_bcast_s ? n->bcast_s : f->predicted_bcast_s;
  }
  f->predicted_s = f->predicted_read_s + f->predicted_bcast_s;
  return SL_STATUS_OK;
}

void sl__figures_nodes_json(sl__buf *b, const sl__figures *f) {
  sl__buf_appendf(b, "\"nodes\":[");
  for (uint32_t i = 0; i < f->n_nodes; i++) {
    const sl__node_figures *n = &f->nodes[i];
    sl__buf_appendf(b, "%s{\"node\":%u,\"hostname\":", i > 0 ? "," : "", i);
    if (f->hosts != NULL)
      sl__buf_json_str(b, f->hosts[i]);
    else
      sl__buf_appendf(b, "null");
    sl__buf_appendf(b,
                    ",\"ranks\":%u,\"bytes_read\":%llu,\"bytes_received\":%llu,\"bytes_sent\":%llu,"
                    "\"bytes_storage_blocks\":%llu,\"bytes_network_in\":%llu,\"bytes_network_out\":%llu,"
                    "\"predicted_read_seconds\":%.3f,\"predicted_broadcast_seconds\":%.3f}",
                    n->ranks, (unsigned long long)n->read, (unsigned long long)n->received,
                    (unsigned long long)n->sent, (unsigned long long)n->storage,
                    (unsigned long long)n->net_in, (unsigned long long)n->net_out, n->read_s, n->bcast_s);
  }
  sl__buf_appendf(b, "],");
}
