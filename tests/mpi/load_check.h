/*
 * load_check.h — the shared driver of the byte-exact multi-rank tests: load one fixture in one
 * parallel layout with a fresh loader on MPI_COMM_WORLD, then compare every rank's table with the
 * independent reference (tests/common/reference.h) byte for byte, and rank 0's report with the
 * reference's cluster figures. Failures are recorded with the CHECK macros of check.h.
 */
#ifndef SL_TEST_LOAD_CHECK_H
#define SL_TEST_LOAD_CHECK_H

#include "reference.h"

#include <stdbool.h>

typedef struct lc_case {
  const char *fixture;     /* folder name under $SL_FIXTURES (or an absolute folder) */
  const char *arch_family; /* NULL, or "fused3d" (passes tests/data/fused3d_spec.json as arch) */
  int tp, pp, dp;
  bool ep;              /* enable_expert_parallel */
  bool round_robin;     /* expert_placement round_robin */
  bool checkpoint;      /* layout checkpoint */
  bool no_coalesce;     /* coalesce_gap_bytes 0: then no rank may read a byte it does not need */
  const char *extra[8]; /* more config keys and values: key, value, key, value, ..., NULL */
  /* Load from this folder instead (a copy of the fixture that some ranks cannot see, tests/mpi/
   * hide_files.sh); the reference still reads the fixture. Then a rank may read bytes for others. */
  const char *model_dir;
  sl_status expect;        /* non-OK: the load must fail with this status (overrides the reference) */
  const char *expect_text; /* ... and a message containing this */
} lc_case;

/* What lc_run leaves for callers that want to look further (valid until lc_result_free). */
typedef struct lc_result {
  sl_status status;   /* this rank's sl_loader_load status (or the create status) */
  sl_loader *loader;  /* NULL when creation failed */
  sl_ref_table *ref;  /* NULL when the reference says the layout is invalid */
  char message[2048]; /* the loader's message on failure */
} lc_result;

/* The folder of a fixture: $SL_FIXTURES/name (static buffer per call site is not needed: the
 * result is written to out). */
void lc_fixture_path(const char *name, char *out, size_t cap);

/* Opens (and caches, per process) the reference model of a fixture. NULL on failure (a CHECK fails). */
sl_ref_model *lc_model(const char *fixture, const char *arch_family);
/* Closes every cached model. */
void lc_models_close(void);

/* COLLECTIVE. Loads and checks one case. When keep is non-NULL the loader and reference table are
 * handed over (free with lc_result_free); otherwise they are freed. Returns true when the load
 * succeeded (or failed exactly as the reference predicts). */
bool lc_run(const lc_case *c, lc_result *keep);
void lc_result_free(lc_result *r);

/* This rank's loader table against a reference table: exactly the same names, and for each
 * entry dtype, shapes, size, device, alias and every byte. */
void lc_check_table(const char *label, const sl_ref_model *m, const sl_loader *l, const sl_ref_table *ref);
/* One loader entry against its reference entry. */
void lc_check_param(const char *label, const sl_ref_model *m, const sl_loader *l, const sl_param *p,
                    const sl_ref_param *e);

/* Rank 0: its loader's JSON report against the reference's cluster figures of the case (every
 * byte read once, each rank's reads as planned, the figures of the layout). */
void lc_check_report(const char *label, const lc_case *c, const sl_ref_model *m, const char *json);

/* A short label of the case for messages: "llama tp2 pp1 dp2 ep vllm". */
void lc_label(const lc_case *c, char *out, size_t cap);

/* Library warnings (expected ones, e.g. the round_robin fallback) off unless SHARDLOAD_LOG is set. */
void lc_quiet_logs(void);

/* COLLECTIVE. Rank 0 drops the cached pages of dir/name (a page a loader still maps stays: call it
 * once every rank is past its loads); every rank waits for it. */
void lc_evict(const char *dir, const char *name);

/* COLLECTIVE. A temporary folder made by rank 0, its path broadcast to every rank (caller frees);
 * lc_tmpdir_remove waits for every rank, then rank 0 removes it. */
char *lc_tmpdir(const char *tag);
void lc_tmpdir_remove(char *dir);
/* COLLECTIVE. Rank 0 runs $SL_SOURCE_DIR/scripts/make-fixture FIXTURE DIR ARGS; every rank gets
 * whether it succeeded (a CHECK fails otherwise). */
bool lc_make_variant(const char *fixture, const char *dir, const char *args);

/* COLLECTIVE. Rank 0 writes a synthetic Llama checkpoint into dir (created): H 16, 2 layers, 4
 * heads, 2 kv heads, I 32 and a vocabulary of 65 rows (docs/spec/LAYOUTS.md §3.4's golden: at tp 4 the padded
 * 128 rows give rank 2 one real row and rank 3 none), bytes from the value function. */
bool lc_write_tiny_vocab65(const char *dir);

/* Rank and size of MPI_COMM_WORLD. */
int lc_rank(void);
int lc_world(void);

/* The layouts (tp, pp, dp) with tp*pp*dp == world, into out (up to cap); returns the count. */
int lc_layouts(int world, int out[][3], int cap);

/* COLLECTIVE. lc_run on each fixture (names under $SL_FIXTURES) at every layout of lc_layouts for
 * the world size, without and with expert parallelism (with it, coalescing off: no rank reads a
 * byte it does not need), in the vllm and the checkpoint layout: 4 cases per fixture and layout. */
void lc_run_layouts(const char *const *fixtures, size_t n);

#endif
