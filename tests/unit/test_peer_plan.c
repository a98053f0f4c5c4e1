/*
 * test_peer_plan.c — the plan of a load from peers (src/plan/peers.c, docs/spec/DESIGN.md §11) against
 * an independent simulation: every donor's memory is labelled byte by byte with the checkpoint byte
 * its copies put there (tensor, offset); the plan's parts are then applied byte by byte into the
 * receivers' memory, and every byte of every receiver copy must carry the label of its own
 * checkpoint byte, written exactly once, and nothing else written. Layouts: row and column slices,
 * replicas, overlapping donors, padded destinations, several copies into one parameter, messages
 * smaller than a row; the messages tile their parts, donors on the receiver's node are preferred,
 * replicas share the sending, and a byte no donor holds is refused with a message naming it.
 * Relays: the parts are applied in message order, so that a relay forwards only bytes it already
 * holds; replicas of one node with no donor there take the bytes over the link once and forward
 * them (balanced among them, the time model counting them once), and nothing is relayed when a
 * donor sits on their node or when their bytes differ.
 */
#include "check.h"
#include "model/catalog.h"
#include "plan/peers.h"

#include <stdlib.h>
#include <string.h>

#define T0_ROWS 8
#define T0_COLS 24
#define T1_BYTES 40
#define MAX_COPIES 16
#define MAX_RANKS 10

typedef struct job {
  uint32_t world;
  sl__copy copies[MAX_RANKS][MAX_COPIES];
  sl__peer_rank ranks[MAX_RANKS];
} job;

static void add(job *j, uint32_t rank, bool donor, uint32_t node, sl__copy c) {
  sl__peer_rank *r = &j->ranks[rank];
  r->donor = donor;
  r->node = node;
  r->copies = j->copies[rank];
  j->copies[rank][r->n_copies++] = c;
  if (rank + 1 > j->world)
    j->world = rank + 1;
}

/* Rows [r0, r1) × columns [c0, c1) of tensor 0 into lparam at dst (rows dst_stride apart). */
static sl__copy rect(uint32_t lparam, uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1, uint64_t dst,
                     uint64_t dst_stride) {
  return (sl__copy){.lparam = lparam,
                    .tensor = 0,
                    .unit = SL_NONE,
                    .src_off = r0 * T0_COLS + c0,
                    .src_stride = T0_COLS,
                    .row_bytes = c1 - c0,
                    .rows = r1 - r0,
                    .dst_off = dst,
                    .dst_stride = dst_stride};
}

static sl__copy flat(uint32_t lparam, uint32_t tensor, uint64_t off, uint64_t len, uint64_t dst) {
  return (sl__copy){.lparam = lparam,
                    .tensor = tensor,
                    .unit = SL_NONE,
                    .src_off = off,
                    .src_stride = 0,
                    .row_bytes = len,
                    .rows = 1,
                    .dst_off = dst,
                    .dst_stride = 0};
}

static uint64_t label(uint32_t tensor, uint64_t off) {
  return ((uint64_t)(tensor + 1) << 32) | off;
}

/* Per rank and lparam: labels (uint64 per byte) and write counts. */
typedef struct mem {
  uint64_t *lab[MAX_RANKS][MAX_COPIES];
  uint32_t *cnt[MAX_RANKS][MAX_COPIES];
  uint64_t size[MAX_RANKS][MAX_COPIES];
} mem;

static void mem_init(mem *m, const job *j) {
  memset(m, 0, sizeof *m);
  for (uint32_t r = 0; r < j->world; r++)
    for (size_t k = 0; k < j->ranks[r].n_copies; k++) {
      const sl__copy *c = &j->copies[r][k];
      uint64_t end = c->dst_off + (c->rows - 1) * c->dst_stride + c->row_bytes;
      if (end > m->size[r][c->lparam])
        m->size[r][c->lparam] = end;
    }
  for (uint32_t r = 0; r < j->world; r++)
    for (uint32_t p = 0; p < MAX_COPIES; p++) {
      m->lab[r][p] = calloc(m->size[r][p] + 1, sizeof(uint64_t));
      m->cnt[r][p] = calloc(m->size[r][p] + 1, sizeof(uint32_t));
    }
  for (uint32_t r = 0; r < j->world; r++)
    for (size_t k = 0; j->ranks[r].donor && k < j->ranks[r].n_copies; k++) {
      const sl__copy *c = &j->copies[r][k];
      for (uint64_t row = 0; row < c->rows; row++)
        for (uint64_t b = 0; b < c->row_bytes; b++)
          m->lab[r][c->lparam][c->dst_off + row * c->dst_stride + b] =
              label(c->tensor, c->src_off + row * c->src_stride + b);
    }
}

static void mem_free(mem *m) {
  for (uint32_t r = 0; r < MAX_RANKS; r++)
    for (uint32_t p = 0; p < MAX_COPIES; p++) {
      free(m->lab[r][p]);
      free(m->cnt[r][p]);
    }
}

/* Builds the plan, applies it, checks every receiver byte and the messages. */
static void run(const char *what, job *j, uint64_t msg_bytes, sl__peer_plan *keep) {
  sl__peer_plan pp;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__peer_plan_build(j->ranks, j->world, NULL, msg_bytes, &pp, &err);
  CHECKF(st == SL_STATUS_OK, "%s: %s", what, err.msg);
  if (st != SL_STATUS_OK)
    return;
  mem m;
  mem_init(&m, j);
  uint64_t moved = 0;
  for (size_t k = 0; k < pp.n_parts; k++) {
    const sl__peer_part *p = &pp.parts[k];
    /* a relay: another receiver of the receiver's node */
    bool from_ok = p->relay ? !j->ranks[p->donor].donor && p->donor != p->receiver &&
                                  j->ranks[p->donor].node == j->ranks[p->receiver].node
                            : j->ranks[p->donor].donor;
    CHECKF(from_ok && !j->ranks[p->receiver].donor, "%s: part %zu between %u and %u (relay %d)", what, k,
           p->donor, p->receiver, p->relay);
    const sl__peer_msg *g = &pp.msgs[p->msg];
    CHECKF(g->donor == p->donor && g->receiver == p->receiver && g->relay == p->relay &&
               p->msg_off + p->rows * p->row_bytes <= g->nbytes,
           "%s: part %zu outside its message", what, k);
    CHECKF(k == 0 || p->relay || !pp.parts[k - 1].relay, "%s: a donor's part %zu after a relay's", what, k);
    for (uint64_t t = 0; t < p->rows; t++)
      for (uint64_t b = 0; b < p->row_bytes; b++) {
        uint64_t d = p->d_off + t * p->d_stride + b;
        uint64_t r = p->r_off + t * p->r_stride + b;
        CHECKF(d < m.size[p->donor][p->d_lparam] && r < m.size[p->receiver][p->r_lparam],
               "%s: part %zu out of bounds", what, k);
        if (d >= m.size[p->donor][p->d_lparam] || r >= m.size[p->receiver][p->r_lparam])
          continue;
        m.lab[p->receiver][p->r_lparam][r] = m.lab[p->donor][p->d_lparam][d];
        m.cnt[p->receiver][p->r_lparam][r]++;
        moved++;
      }
  }
  /* Messages: in the order of their parts, each tiled by them. */
  for (size_t g = 0; g < pp.n_msgs; g++) {
    const sl__peer_msg *msg = &pp.msgs[g];
    uint64_t at = 0;
    for (uint32_t i = 0; i < msg->n_parts; i++) {
      const sl__peer_part *p = &pp.parts[msg->first_part + i];
      CHECKF(p->msg == g && p->msg_off == at, "%s: message %zu not tiled", what, g);
      at += p->rows * p->row_bytes;
    }
    CHECKF(at == msg->nbytes && (msg_bytes == 0 || at <= msg_bytes), "%s: message %zu holds %llu bytes", what,
           g, (unsigned long long)at);
    const uint32_t *gm = &pp.group_members[2 * msg->group];
    CHECKF(gm[0] < gm[1] && (gm[0] == msg->donor || gm[1] == msg->donor) &&
               (gm[0] == msg->receiver || gm[1] == msg->receiver),
           "%s: message %zu's group", what, g);
  }
  uint64_t needed = 0;
  for (uint32_t r = 0; r < j->world; r++)
    for (size_t k = 0; !j->ranks[r].donor && k < j->ranks[r].n_copies; k++) {
      const sl__copy *c = &j->copies[r][k];
      for (uint64_t row = 0; row < c->rows; row++)
        for (uint64_t b = 0; b < c->row_bytes; b++) {
          uint64_t at = c->dst_off + row * c->dst_stride + b;
          uint64_t want = label(c->tensor, c->src_off + row * c->src_stride + b);
          CHECKF(m.lab[r][c->lparam][at] == want && m.cnt[r][c->lparam][at] == 1,
                 "%s: rank %u copy %zu row %llu byte %llu: label %llx (want %llx), written %u times", what, r,
                 k, (unsigned long long)row, (unsigned long long)b,
                 (unsigned long long)m.lab[r][c->lparam][at], (unsigned long long)want,
                 m.cnt[r][c->lparam][at]);
          needed++;
        }
    }
  CHECKF(moved == needed, "%s: %llu bytes moved, %llu needed", what, (unsigned long long)moved,
         (unsigned long long)needed);
  uint64_t sent = 0, received = 0;
  for (uint32_t r = 0; r < j->world; r++) {
    sent += pp.sent[r];
    received += pp.received[r];
  }
  CHECK_EQ_U64(sent, needed);
  CHECK_EQ_U64(received, needed);
  mem_free(&m);
  if (keep != NULL)
    *keep = pp;
  else
    sl__peer_plan_free(&pp);
}

/* Donors: 0 .. nd-1 in `donor_layout`; receivers after them in `recv_layout`. */
enum { ROWS2, COLS2, REPL3, OVERLAP3, WHOLE1 };
enum { RCOLS3, RROWS4, RPADDED1, RMIXED2 };

static uint32_t donors(job *j, int layout) {
  switch (layout) {
  case ROWS2:
    add(j, 0, true, 0, rect(0, 0, 4, 0, T0_COLS, 0, T0_COLS));
    add(j, 0, true, 0, flat(1, 1, 0, T1_BYTES, 0));
    add(j, 1, true, 0, rect(0, 4, 8, 0, T0_COLS, 0, T0_COLS));
    add(j, 1, true, 0, flat(1, 1, 0, T1_BYTES, 0));
    return 2;
  case COLS2: /* column slices, padded rows; tensor 1 cut in two */
    add(j, 0, true, 0, rect(0, 0, 8, 0, 12, 4, 16));
    add(j, 0, true, 0, flat(1, 1, 0, 20, 0));
    add(j, 1, true, 0, rect(0, 0, 8, 12, 24, 0, 12));
    add(j, 1, true, 0, flat(1, 1, 20, 20, 0));
    return 2;
  case REPL3:
    for (uint32_t d = 0; d < 3; d++) {
      add(j, d, true, d, rect(0, 0, 8, 0, T0_COLS, 0, T0_COLS));
      add(j, d, true, d, flat(1, 1, 0, T1_BYTES, 0));
    }
    return 3;
  case OVERLAP3: /* rows 0..5 and 3..7 overlap; donor 2 a column band; tensor 1 in overlapping halves */
    add(j, 0, true, 0, rect(0, 0, 6, 0, T0_COLS, 0, T0_COLS));
    add(j, 0, true, 0, flat(1, 1, 0, 30, 0));
    add(j, 1, true, 0, rect(0, 3, 8, 0, T0_COLS, 0, T0_COLS));
    add(j, 1, true, 0, flat(1, 1, 10, 30, 0));
    add(j, 2, true, 1, rect(0, 0, 8, 4, 10, 0, 6));
    return 3;
  default: /* WHOLE1 */
    add(j, 0, true, 0, rect(0, 0, 8, 0, T0_COLS, 0, T0_COLS));
    add(j, 0, true, 0, flat(1, 1, 0, T1_BYTES, 0));
    return 1;
  }
}

static void receivers(job *j, uint32_t base, int layout) {
  switch (layout) {
  case RCOLS3:
    for (uint32_t q = 0; q < 3; q++) {
      add(j, base + q, false, q % 2, rect(0, 0, 8, 8 * q, 8 * q + 8, 0, 8));
      add(j, base + q, false, q % 2, flat(1, 1, 0, T1_BYTES, 0));
    }
    break;
  case RROWS4:
    for (uint32_t q = 0; q < 4; q++)
      add(j, base + q, false, q % 2, rect(0, 2 * q, 2 * q + 2, 0, T0_COLS, 0, T0_COLS));
    break;
  case RPADDED1: /* whole, rows 32 apart, tensor 1 after it in the same parameter */
    add(j, base, false, 0, rect(0, 0, 8, 0, T0_COLS, 0, 32));
    add(j, base, false, 0, flat(0, 1, 0, T1_BYTES, 8 * 32));
    break;
  default: /* RMIXED2: odd column bands and a strided view of tensor 1 */
    add(j, base, false, 1, rect(0, 1, 7, 3, 17, 2, 20));
    add(j, base, false, 1,
        (sl__copy){.lparam = 1,
                   .tensor = 1,
                   .unit = SL_NONE,
                   .src_off = 1,
                   .src_stride = 9,
                   .row_bytes = 5,
                   .rows = 4,
                   .dst_off = 0,
                   .dst_stride = 5});
    add(j, base + 1, false, 0, rect(0, 0, 8, 17, 24, 0, 7));
    add(j, base + 1, false, 0, rect(1, 0, 1, 0, 3, 0, 3));
    break;
  }
}

static void every_pair(void) {
  const char *dn[] = {"rows2", "cols2", "repl3", "overlap3", "whole1"};
  const char *rn[] = {"cols3", "rows4", "padded1", "mixed2"};
  const uint64_t caps[] = {0, 7, 50, 1000};
  for (int d = 0; d < 5; d++)
    for (int r = 0; r < 4; r++)
      for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        job j;
        memset(&j, 0, sizeof j);
        uint32_t nd = donors(&j, d);
        receivers(&j, nd, r);
        char what[96];
        snprintf(what, sizeof what, "%s -> %s (messages of %llu)", dn[d], rn[r], (unsigned long long)caps[c]);
        run(what, &j, caps[c], NULL);
      }
}

/* Column slices from row slices are strided parts, not one part per row. */
static void merged(void) {
  job j;
  memset(&j, 0, sizeof j);
  uint32_t nd = donors(&j, ROWS2);
  receivers(&j, nd, RCOLS3);
  sl__peer_plan pp;
  run("merged", &j, 0, &pp);
  /* 3 receivers × (2 donors' halves of tensor 0 + tensor 1 once) */
  CHECK_EQ_U64(pp.n_parts, 9);
  sl__peer_plan_free(&pp);
}

/* Replicas on the receivers' nodes send to them; spread otherwise. */
static void nearness_and_balance(void) {
  job j;
  memset(&j, 0, sizeof j);
  uint32_t nd = donors(&j, REPL3); /* donor d on node d */
  for (uint32_t q = 0; q < 3; q++)
    add(&j, nd + q, false, q, rect(0, 0, 8, 0, T0_COLS, 0, T0_COLS));
  sl__peer_plan pp;
  run("near", &j, 0, &pp);
  for (size_t k = 0; k < pp.n_parts; k++)
    CHECKF(pp.parts[k].donor == pp.parts[k].receiver - nd, "part %zu: donor %u for receiver %u", k,
           pp.parts[k].donor, pp.parts[k].receiver);
  sl__peer_plan_free(&pp);
  memset(&j, 0, sizeof j);
  nd = donors(&j, REPL3);
  for (uint32_t q = 0; q < 6; q++) /* each on a node of its own: no relay */
    add(&j, nd + q, false, 10 + q, rect(0, 0, 8, 0, T0_COLS, 0, T0_COLS));
  run("balance", &j, 0, &pp);
  for (uint32_t d = 0; d < nd; d++)
    CHECK_EQ_U64(pp.sent[d], 2 * T0_ROWS * T0_COLS);
  sl__peer_plan_free(&pp);
}

static uint64_t relayed_bytes(const sl__peer_plan *pp) {
  uint64_t n = 0;
  for (size_t k = 0; k < pp->n_parts; k++)
    n += pp->parts[k].relay ? pp->parts[k].rows * pp->parts[k].row_bytes : 0;
  return n;
}

/* Donors ROWS2 on node 0; `reps` replicas of the whole model on node 1 (padded differently), one more
 * receiver alone on node 2. */
static void replicas(job *j, uint32_t reps) {
  memset(j, 0, sizeof *j);
  uint32_t nd = donors(j, ROWS2);
  for (uint32_t q = 0; q < reps; q++) {
    add(j, nd + q, false, 1, rect(0, 0, 8, 0, T0_COLS, q, T0_COLS + q));
    add(j, nd + q, false, 1, flat(1, 1, 0, T1_BYTES, 0));
  }
  add(j, nd + reps, false, 2, rect(0, 0, 8, 0, T0_COLS, 0, T0_COLS));
}

/* Replicas of one node: the link once, forwarded within the node, relays balanced; the model. */
static void relays(void) {
  const uint64_t model = T0_ROWS * T0_COLS + T1_BYTES;
  const uint64_t caps[] = {0, 7, 50};
  for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
    job j;
    replicas(&j, 4);
    sl__peer_plan pp;
    char what[64];
    snprintf(what, sizeof what, "relays (messages of %llu)", (unsigned long long)caps[c]);
    run(what, &j, caps[c], &pp);
    uint32_t node_of[MAX_RANKS];
    for (uint32_t r = 0; r < j.world; r++)
      node_of[r] = j.ranks[r].node;
    sl__peer_model pm;
    sl__err err;
    sl__err_clear(&err);
    CHECK(sl__peer_model_build(&pp, node_of, 3, 1.0, &pm, &err) == SL_STATUS_OK);
    CHECK_EQ_U64(pm.net_in[1], model);             /* the link into node 1 once */
    CHECK_EQ_U64(pm.relayed[1], 3 * model);        /* forwarded to the 3 others */
    CHECK_EQ_U64(pm.net_in[2], T0_ROWS * T0_COLS); /* alone: direct */
    CHECK_EQ_U64(pm.net_out[0], model + T0_ROWS * T0_COLS);
    CHECK_EQ_U64(relayed_bytes(&pp), 3 * model);
    double want =
        (double)(model + T0_ROWS * T0_COLS) / 1e9 + (double)(3 * model) / (SL_PEER_LOCAL_GBPS * 1e9);
    CHECKF(pm.predicted_s > want * 0.999999 && pm.predicted_s < want * 1.000001, "predicted %g, want %g",
           pm.predicted_s, want);
    /* Balanced: the three groups (two halves of tensor 0 from two donors, tensor 1) on three relays. */
    uint32_t relaying = 0;
    for (uint32_t q = 2; q < 6; q++)
      relaying += pp.sent[q] > 0;
    CHECK_EQ_U64(relaying, 3);
    sl__peer_model_free(&pm);
    sl__peer_plan_free(&pp);
  }
  /* A donor on their node: no relay. */
  job j;
  replicas(&j, 3);
  add(&j, 6, true, 1, rect(0, 0, 8, 0, T0_COLS, 0, T0_COLS));
  add(&j, 6, true, 1, flat(1, 1, 0, T1_BYTES, 0));
  sl__peer_plan pp;
  run("a donor near", &j, 0, &pp);
  CHECK_EQ_U64(relayed_bytes(&pp), 0);
  sl__peer_plan_free(&pp);
  /* Different bytes on one node: no relay. */
  memset(&j, 0, sizeof j);
  uint32_t nd = donors(&j, ROWS2);
  for (uint32_t q = 0; q < 4; q++)
    add(&j, nd + q, false, 1, rect(0, 2 * q, 2 * q + 2, 0, T0_COLS, 0, T0_COLS));
  run("distinct rows", &j, 0, &pp);
  CHECK_EQ_U64(relayed_bytes(&pp), 0);
  sl__peer_plan_free(&pp);
  /* One receiver alone on its node: no relay either. */
  replicas(&j, 1);
  run("one replica", &j, 0, &pp);
  CHECK_EQ_U64(relayed_bytes(&pp), 0);
  sl__peer_plan_free(&pp);
}

static void refused(void) {
  job j;
  memset(&j, 0, sizeof j);
  add(&j, 0, true, 0, rect(0, 0, 4, 0, T0_COLS, 0, T0_COLS));
  add(&j, 1, false, 0, rect(0, 0, 8, 0, 8, 0, 8));
  sl__cat_tensor t[1] = {{.name = "w.weight"}};
  sl__catalog cat = {.n_tensors = 1, .tensors = t};
  sl__peer_plan pp;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__peer_plan_build(j.ranks, j.world, &cat, 0, &pp, &err);
  CHECK(st == SL_STATUS_NOT_FOUND);
  CHECKF(strstr(err.msg, "w.weight") != NULL && strstr(err.msg, "byte 96") != NULL &&
             strstr(err.msg, "rank 1") != NULL,
         "message: %s", err.msg);
}

int main(void) {
  every_pair();
  merged();
  nearness_and_balance();
  relays();
  refused();
  return sl_test_finish();
}
