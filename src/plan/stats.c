/*
 * plan/stats.c — cluster figures from per-rank statistics (see plan/stats.h).
 */
#include "plan/stats.h"

#include "base/bytes_fmt.h"

#include <stdio.h>
#include <stdlib.h>

void sl__figures_compute(const sl_rank_stats *stats, uint32_t world, uint64_t unique, double storage_gbps,
                         double network_gbps, uint32_t ranks_per_node, sl__figures *f) {
  *f = (sl__figures){.world = world,
                     .unique = unique,
                     .storage_gbps = storage_gbps,
                     .network_gbps = network_gbps,
                     .ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 1};
  for (uint32_t r = 0; r < world; r++) {
    const sl_rank_stats *s = &stats[r];
    f->needed += s->bytes_needed;
    f->read += s->bytes_read;
    f->covering += s->bytes_covering;
    f->received += s->bytes_received;
    f->naive += s->bytes_naive;
    if (s->bytes_read > stats[f->largest].bytes_read)
      f->largest = r;
    if (s->bytes_read < stats[f->smallest].bytes_read)
      f->smallest = r;
  }
  double u = unique > 0 ? (double)unique : 1.0;
  f->amplification = unique > 0 ? (double)(f->read - f->covering) / u : 0.0;
  f->amplification_covering = unique > 0 ? (double)f->read / u : 0.0;
  f->naive_amplification = unique > 0 ? (double)f->naive / u : 0.0;
  /* Per node: reads share the node's storage bandwidth; broadcast traffic its network link. */
  uint32_t rpn = f->ranks_per_node;
  uint32_t nodes = (world + rpn - 1) / rpn;
  double worst_read = 0;
  double worst_net = 0;
  double worst_naive = 0;
  for (uint32_t n = 0; n < nodes; n++) {
    uint64_t rd = 0;
    uint64_t in = 0;
    uint64_t out = 0;
    uint64_t nv = 0;
    for (uint32_t r = n * rpn; r < world && r < (n + 1) * rpn; r++) {
      rd += stats[r].bytes_read;
      in += stats[r].bytes_received;
      out += stats[r].bytes_sent;
      nv += stats[r].bytes_naive;
    }
    double tr = (double)rd / (storage_gbps * 1e9);
    double tn = (double)(in > out ? in : out) / (network_gbps * 1e9);
    double tv = (double)nv / (storage_gbps * 1e9);
    worst_read = tr > worst_read ? tr : worst_read;
    worst_net = tn > worst_net ? tn : worst_net;
    worst_naive = tv > worst_naive ? tv : worst_naive;
  }
  f->predicted_s = worst_read + worst_net;
  f->predicted_naive_s = worst_naive;
}

static void rank_json(sl__buf *b, uint32_t r, const sl_rank_stats *s) {
  sl__buf_appendf(b,
                  "{\"rank\":%u,\"bytes_needed\":%llu,\"bytes_read\":%llu,\"bytes_covering\":%llu,"
                  "\"bytes_received\":%llu,\"bytes_sent\":%llu,\"bytes_local\":%llu,\"bytes_naive\":%llu,"
                  "\"files_opened\":%u,\"params\":%u,\"experts_local\":%u}",
                  r, (unsigned long long)s->bytes_needed, (unsigned long long)s->bytes_read,
                  (unsigned long long)s->bytes_covering, (unsigned long long)s->bytes_received,
                  (unsigned long long)s->bytes_sent, (unsigned long long)s->bytes_local,
                  (unsigned long long)s->bytes_naive, s->files_opened, s->params, s->experts_local);
}

void sl__figures_json(sl__buf *b, const sl__figures *f) {
  sl__buf_appendf(b,
                  "\"world\":%u,\"bytes_unique\":%llu,\"bytes_needed\":%llu,\"bytes_read\":%llu,"
                  "\"bytes_covering\":%llu,\"bytes_broadcast\":%llu,\"bytes_naive\":%llu,"
                  "\"read_amplification\":%.4f,\"read_amplification_with_covering\":%.4f,"
                  "\"naive_read_amplification\":%.4f,\"largest_rank\":%u,\"smallest_rank\":%u,",
                  f->world, (unsigned long long)f->unique, (unsigned long long)f->needed,
                  (unsigned long long)f->read, (unsigned long long)f->covering,
                  (unsigned long long)f->received, (unsigned long long)f->naive, f->amplification,
                  f->amplification_covering, f->naive_amplification, f->largest, f->smallest);
  sl__buf_appendf(b,
                  "\"prediction\":{\"storage_gbps_per_node\":%g,\"network_gbps_per_node\":%g,"
                  "\"ranks_per_node\":%u,\"nodes\":%u,\"node_layout\":\"%s\",\"storage_block_bytes\":%llu,"
                  "\"predicted_read_seconds\":%.3f,\"predicted_broadcast_seconds\":%.3f,"
                  "\"predicted_seconds\":%.3f,\"predicted_naive_seconds\":%.3f},",
                  f->storage_gbps, f->network_gbps, f->ranks_per_node, f->n_nodes,
                  f->nodes_from_job ? "job" : "configured", (unsigned long long)f->block, f->predicted_read_s,
                  f->predicted_bcast_s, f->predicted_s, f->predicted_naive_s);
}

void sl__figures_ranks_json(sl__buf *b, const sl_rank_stats *stats, uint32_t world) {
  sl__buf_appendf(b, "\"ranks\":[");
  for (uint32_t r = 0; r < world; r++) {
    if (r > 0)
      sl__buf_putc(b, ',');
    rank_json(b, r, &stats[r]);
  }
  sl__buf_putc(b, ']');
}

static void rank_row(sl__buf *b, uint32_t r, const sl_rank_stats *s, const char *tag) {
  char need[32], rd[32], cov[32], rcv[32], snt[32];
  sl__fmt_bytes(need, sizeof need, s->bytes_needed);
  sl__fmt_bytes(rd, sizeof rd, s->bytes_read);
  sl__fmt_bytes(cov, sizeof cov, s->bytes_covering);
  sl__fmt_bytes(rcv, sizeof rcv, s->bytes_received);
  sl__fmt_bytes(snt, sizeof snt, s->bytes_sent);
  sl__buf_appendf(b, "  %6u %12s %12s %12s %12s %12s %6u %7u %7u%s\n", r, need, rd, cov, rcv, snt,
                  s->files_opened, s->params, s->experts_local, tag);
}

void sl__figures_table(sl__buf *b, const sl__figures *f, const sl_rank_stats *stats, uint32_t max_rows) {
  char un[32], rd[32], cov[32], bc[32], nv[32];
  sl__fmt_bytes(un, sizeof un, f->unique);
  sl__fmt_bytes(rd, sizeof rd, f->read);
  sl__fmt_bytes(cov, sizeof cov, f->covering);
  sl__fmt_bytes(bc, sizeof bc, f->received);
  sl__fmt_bytes(nv, sizeof nv, f->naive);
  sl__buf_appendf(
      b,
      "ranks: %u\n"
      "bytes needed by the job (distinct slices): %s\n"
      "bytes read cluster-wide: %s (of which covering gaps: %s)\n"
      "read amplification: %.2f (%.2f with covering bytes); every rank reading whole tensors: %.2f (%s)\n"
      "bytes received by broadcast: %s\n"
      "predicted load time: %.2f s (storage %.1f GB/s and network %.1f GB/s per node, %u ranks per node); "
      "whole-tensor reads: %.2f s\n",
      f->world, un, rd, cov, f->amplification, f->amplification_covering, f->naive_amplification, nv, bc,
      f->predicted_s, f->storage_gbps, f->network_gbps, f->ranks_per_node, f->predicted_naive_s);
  sl__buf_appendf(b, "  %6s %12s %12s %12s %12s %12s %6s %7s %7s\n", "rank", "needed", "read", "covering",
                  "received", "sent", "files", "params", "experts");
  if (f->world <= max_rows) {
    for (uint32_t r = 0; r < f->world; r++)
      rank_row(b, r, &stats[r], "");
  } else {
    rank_row(b, f->largest, &stats[f->largest], "  (largest)");
    rank_row(b, f->smallest, &stats[f->smallest], "  (smallest)");
  }
}
