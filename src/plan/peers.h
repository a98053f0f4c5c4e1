/*
 * plan/peers.h — loading from peers (docs/spec/DESIGN.md §11): the plan that moves every byte a
 * set of receiving ranks needs out of the memory of ranks that already hold the model in another
 * layout (the donors), never touching storage.
 *
 * Every rank's plan is a list of copies, strided byte copies from a checkpoint tensor region into a
 * local parameter (plan/plan.h). A donor's copies therefore say where each checkpoint byte it holds
 * sits in its memory. Each receiver copy is cut at the boundaries of the donors' regions of the same
 * tensor so that every part lies inside one donor region (each receiver byte from exactly one donor
 * byte: a region held on the receiver's node when one holds it); rows that continue a part in step
 * are merged into it, so that a column slice taken from a row slice is one strided part, not one
 * part per row. A part goes to the donor holding its region that is on the receiver's node when one
 * is, else the one that sent least so far (parts largest first). Relays: when several receivers of one node
 * need the same bytes (the same part geometry in the checkpoint) and no donor on their node holds them, they
 * cross the link once, to one of them (the one that has taken least over the link so far, groups largest
 * first), which forwards them to the others from its own parameters, already filled: a node pulls such bytes
 * once, as a storage load reads once per node and broadcasts. Parts travel in messages between two ranks (a
 * broadcast group of two), numbered in one global order every rank walks: round k carries the k-th message of
 * every pair, every donor's message before every relay's, so that a relay's bytes have arrived
 * before it sends them. Pure: a function of the ranks' copies and nodes.
 */
#ifndef SL_PLAN_PEERS_H
#define SL_PLAN_PEERS_H

#include "base/err.h"
#include "plan/plan.h"

#include <stdbool.h>
#include <stdint.h>

/* One rank of the job as the planner takes it. */
typedef struct sl__peer_rank {
  bool donor;             /* holds the model (its copies say where); else a receiver */
  uint32_t node;          /* ranks with equal nodes share a machine */
  const sl__copy *copies; /* its rank plan's copies (a receiver's: what it needs) */
  size_t n_copies;
  /* A receiver's, per copy, or NULL: nonzero where its memory does not hold the copy's bytes as
   * the checkpoint's (another dtype, transposed), so that it cannot forward them as a relay. */
  const uint8_t *no_relay;
} sl__peer_rank;

/* A strided run of bytes: `rows` rows of row_bytes from a donor's parameter to a receiver's. */
typedef struct sl__peer_part {
  uint32_t donor, receiver; /* ranks of the job */
  uint32_t d_lparam, r_lparam;
  uint32_t r_copy; /* the receiver's copy it (partly) delivers */
  uint32_t tensor;
  uint64_t src_off, src_stride; /* its checkpoint bytes */
  uint64_t d_off, d_stride;     /* in the donor's parameter */
  uint64_t r_off, r_stride;     /* in the receiver's parameter */
  uint64_t row_bytes, rows;
  uint32_t msg;     /* the message that carries it */
  uint64_t msg_off; /* where its rows lie in the message, packed */
  bool relay;       /* a second hop: `donor` is a receiver of the same node forwarding bytes it
                       received (d_lparam, d_off, d_stride: in its own parameters) */
} sl__peer_part;

/* One message: parts from one donor (or relay) to one receiver, packed. */
typedef struct sl__peer_msg {
  uint32_t donor, receiver;
  uint32_t group; /* the pair's broadcast group */
  bool relay;     /* its parts are relays' (second hops) */
  uint64_t nbytes;
  uint64_t first_part;
  uint32_t n_parts;
} sl__peer_msg;

typedef struct sl__peer_plan {
  uint32_t world;
  size_t n_parts;
  sl__peer_part *parts; /* in message order */
  size_t n_msgs;
  sl__peer_msg *msgs; /* the global order */
  size_t n_groups;
  uint32_t *group_members; /* group g: members 2g and 2g + 1, ascending (one group per two ranks) */
  uint64_t *sent;          /* per rank: bytes it sends (a relaying receiver's forwards included) */
  uint64_t *received;      /* per rank */
  uint64_t max_msg;        /* the largest message */
} sl__peer_plan;

/* The plan for ranks[0 .. world). msg_bytes: the largest message (0: SL_BUCKET_BYTES_DEFAULT). An
 * error names the receiver, its local parameter and the checkpoint bytes no donor holds (cat: the
 * tensor names; may be NULL). */
sl_status sl__peer_plan_build(const sl__peer_rank *ranks, uint32_t world, const sl__catalog *cat,
                              uint64_t msg_bytes, sl__peer_plan *out, sl__err *err);

/* What sl__peer_plan_build_opts takes beyond the ranks. */
typedef struct sl__peer_opts {
  uint64_t msg_bytes; /* the largest message (0: SL_BUCKET_BYTES_DEFAULT) */
  const char *giver;  /* who holds the bytes, in messages ("donor" when NULL) */
  /* A row split over messages is cut at whole elements of its tensor (cat's dtypes): the ends of
   * a transfer that converts elements (plan/refit.h) never see part of one. */
  bool whole_elements;
} sl__peer_opts;
/* The last phase (plan/peer_messages.c): parts[0 .. n) (donors chosen) packed into out's messages
 * of at most cap bytes, in the global order, with the pairs' groups; units: a row split over
 * messages is cut at whole elements of its tensor (NULL: anywhere). */
sl_status sl__peer_messages(const sl__peer_part *parts, size_t n, uint64_t cap, const sl__catalog *units,
                            sl__peer_plan *out, sl__err *err);
/* sl__peer_plan_build with options. */
sl_status sl__peer_plan_build_opts(const sl__peer_rank *ranks, uint32_t world, const sl__catalog *cat,
                                   const sl__peer_opts *o, sl__peer_plan *out, sl__err *err);
void sl__peer_plan_free(sl__peer_plan *p);

/* A message within one node is a copy through shared memory: the time model's rate for it, GB/s. */
#define SL_PEER_LOCAL_GBPS 10.0

/* The time model of a load from peers (plan/peer_model.c), per node of the job: the bytes of the
 * messages crossing its link, in and out, and those of its same-node relays. The donors' messages
 * go first, at network_gbps per node (each node max(in, out)); the relays after them, at
 * SL_PEER_LOCAL_GBPS (a node's relay bytes one after another). predicted = the busiest node's
 * network time + the busiest node's relay time. Same-node messages from donors cost nothing. */
typedef struct sl__peer_model {
  uint32_t n_nodes;
  uint64_t *net_in, *net_out, *relayed; /* per node */
  double *node_s;                       /* per node: its network time + its relay time */
  double network_gbps;
  double network_s, relay_s, predicted_s;
} sl__peer_model;

/* The model of plan pp with rank r on node node_of[r] (< n_nodes). Pure. */
sl_status sl__peer_model_build(const sl__peer_plan *pp, const uint32_t *node_of, uint32_t n_nodes,
                               double network_gbps, sl__peer_model *out, sl__err *err);
void sl__peer_model_free(sl__peer_model *m);
/* Model m as the dry runs' JSON members "prediction":{...},"nodes":[...] (a load from peers' and a
 * refit's alike), appended to b; ranks_per_node as the dry run was given it. */
struct sl__buf;
void sl__peer_model_json(struct sl__buf *b, const sl__peer_model *m, uint32_t ranks_per_node);
/* The first n_nodes of the model's per-node rows, comma-separated JSON objects (node, bytes in, out
 * and relayed, predicted seconds): the one writer of those rows (the refit's report uses it too). */
void sl__peer_model_nodes_json(struct sl__buf *b, const sl__peer_model *m, uint32_t n_nodes);

#endif
