/*
 * test_save_atomic.c — `--save-sharded` is all or nothing (docs/spec/TRACKING.md §4.5), at the MPI world size
 * it runs with, every rank checking the folder:
 *   - injected full disk (SHARDLOAD_INJECT_SAVE_ERROR=<rank>, after that rank's first part) on the
 *     last rank and on rank 0: every rank fails (the failing one IO "No space left on device", the
 *     others PEER_FAILED) and no part file, temporary or completion marker (config.json) is left;
 *   - a real full disk: a 64 KiB tmpfs mounted on the output folder (root only; skipped otherwise),
 *     the same verdict;
 *   - an older save by a larger world (rank files beyond this world, a part beyond this rank's
 *     count): refused with CONFIG naming the folder and --overwrite, nothing written, the older
 *     files intact; with overwrite=true the save succeeds, the older files are gone, the marker is
 *     there; saving again over a complete save of the same world needs no overwrite.
 * The model is the llama fixture at tp = world (dp 3 at 3 ranks), parts of at most 6000 bytes.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

static bool exists(const char *dir, const char *name) {
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return stat(path, &st) == 0;
}

/* Files in dir whose names start with prefix (or contain it, for temporaries). */
static int count_named(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  int n = 0;
  const struct dirent *e = d != NULL ? readdir(d) : NULL;
  while (e != NULL) {
    if (strstr(e->d_name, needle) != NULL)
      n++;
    e = readdir(d);
  }
  if (d != NULL)
    closedir(d);
  return n;
}

/* Loads llama with save_sharded=dir (plus kv pairs); returns this rank's status, message in msg. */
static sl_status load_and_save(const char *dir, const char *const *kv, char *msg, size_t cap) {
  int world = lc_world();
  char tp[16];
  char dp[16];
  snprintf(tp, sizeof tp, "%d", world == 3 ? 1 : world);
  snprintf(dp, sizeof dp, "%d", world == 3 ? 3 : 1);
  char model[1024];
  lc_fixture_path("llama", model, sizeof model);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "tp", tp);
  sl_config_set(cfg, "dp", dp);
  sl_config_set(cfg, "quiet", "true");
  sl_config_set(cfg, "save_sharded", dir);
  sl_config_set(cfg, "save_max_part_bytes", "6000");
  for (size_t i = 0; kv != NULL && kv[i] != NULL; i += 2)
    CHECKF(sl_config_set(cfg, kv[i], kv[i + 1]) == SL_STATUS_OK, "%s: %s", kv[i], sl_config_error(cfg));
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  snprintf(msg, cap, "%s", l != NULL ? sl_loader_error(l) : sl_config_error(cfg));
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  MPI_Barrier(MPI_COMM_WORLD);
  return st;
}

/* Every rank: nothing of a failed save in dir (its own parts, any temporary, the marker). */
static void check_nothing_left(const char *what, const char *dir) {
  char mine[64];
  snprintf(mine, sizeof mine, "model-rank-%d-part-", lc_rank());
  CHECKF(count_named(dir, mine) == 0, "%s: rank %d's part files left in %s", what, lc_rank(), dir);
  CHECKF(count_named(dir, ".partial") == 0 && count_named(dir, ".tmp") == 0, "%s: temporaries left in %s",
         what, dir);
  CHECKF(count_named(dir, "model-rank-") == 0, "%s: part files left in %s", what, dir);
  CHECKF(!exists(dir, "config.json"), "%s: a completion marker in %s after a failed save", what, dir);
}

static void check_failed(const char *what, sl_status st, const char *msg, int failing) {
  if (lc_rank() == failing) {
    CHECKF(st == SL_STATUS_IO, "%s: rank %d status %s (%s)", what, lc_rank(), sl_status_name(st), msg);
    CHECKF(strstr(msg, "No space left on device") != NULL, "%s: message \"%s\"", what, msg);
  } else if (failing >= 0) {
    CHECKF(st == SL_STATUS_PEER_FAILED, "%s: rank %d status %s (%s)", what, lc_rank(), sl_status_name(st),
           msg);
  } else {
    CHECKF(st != SL_STATUS_OK, "%s: rank %d: the save succeeded on a full disk", what, lc_rank());
  }
}

static void test_injected(int failing) {
  char *dir = lc_tmpdir("save-inject");
  if (dir == NULL)
    return;
  char val[16];
  snprintf(val, sizeof val, "%d", failing);
  setenv("SHARDLOAD_INJECT_SAVE_ERROR", val, 1);
  char msg[4096];
  sl_status st = load_and_save(dir, NULL, msg, sizeof msg);
  unsetenv("SHARDLOAD_INJECT_SAVE_ERROR");
  char what[64];
  snprintf(what, sizeof what, "injected full disk on rank %d", failing);
  check_failed(what, st, msg, failing);
  check_nothing_left(what, dir);
  MPI_Barrier(MPI_COMM_WORLD);
  lc_tmpdir_remove(dir);
}

/* A 64 KiB tmpfs on the output folder: the checkpoint (about 270 KiB) cannot fit. */
static void test_real_full_disk(void) {
  char *dir = lc_tmpdir("save-tmpfs");
  if (dir == NULL)
    return;
  int mounted = 0;
  if (lc_rank() == 0)
    mounted = mount("tmpfs", dir, "tmpfs", 0, "size=64k") == 0;
  MPI_Bcast(&mounted, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (mounted) {
    char msg[4096];
    sl_status st = load_and_save(dir, NULL, msg, sizeof msg);
    check_failed("tmpfs of 64 KiB", st, msg, -1);
    CHECKF(st == SL_STATUS_IO || st == SL_STATUS_PEER_FAILED, "tmpfs: status %s (%s)", sl_status_name(st),
           msg);
    check_nothing_left("tmpfs of 64 KiB", dir);
    MPI_Barrier(MPI_COMM_WORLD);
    if (lc_rank() == 0)
      CHECKF(umount(dir) == 0, "cannot unmount the tmpfs on %s", dir);
  } else if (lc_rank() == 0) {
    fprintf(stderr, "test_save_atomic: no tmpfs (not root?): the real full-disk case is skipped\n");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  lc_tmpdir_remove(dir);
}

static void test_older_save(void) {
  char *dir = lc_tmpdir("save-older");
  if (dir == NULL)
    return;
  int world = lc_world();
  /* An older save by world + 2 ranks, 1000 parts on rank 0 (more than this save writes). */
  char beyond[3][128];
  snprintf(beyond[0], sizeof beyond[0], "model-rank-%d-part-0.safetensors", world);
  snprintf(beyond[1], sizeof beyond[1], "model-rank-%d-part-0.safetensors", world + 1);
  snprintf(beyond[2], sizeof beyond[2], "model-rank-0-part-999.safetensors");
  if (lc_rank() == 0) {
    for (int i = 0; i < 3; i++) {
      char path[2048];
      snprintf(path, sizeof path, "%s/%s", dir, beyond[i]);
      sl_test_write_file(path, "older", 5);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  char msg[4096];
  sl_status st = load_and_save(dir, NULL, msg, sizeof msg);
  if (lc_rank() == 0) {
    CHECKF(st == SL_STATUS_CONFIG, "older save: status %s (%s)", sl_status_name(st), msg);
    CHECKF(strstr(msg, dir) != NULL && strstr(msg, "--overwrite") != NULL &&
               strstr(msg, "3 part files of an older save") != NULL,
           "older save: message \"%s\"", msg);
  } else {
    CHECKF(st == SL_STATUS_PEER_FAILED, "older save: rank %d status %s", lc_rank(), sl_status_name(st));
  }
  for (int i = 0; i < 3; i++)
    CHECKF(exists(dir, beyond[i]), "older save: %s removed without overwrite", beyond[i]);
  CHECKF(count_named(dir, "model-rank-") == 3 && !exists(dir, "config.json"),
         "older save: the refused save wrote files");
  MPI_Barrier(MPI_COMM_WORLD);
  /* With overwrite: done, the older files gone, the marker in place, this rank's part 0 there. */
  static const char *const over[] = {"overwrite", "true", NULL};
  st = load_and_save(dir, over, msg, sizeof msg);
  CHECKF(st == SL_STATUS_OK, "overwrite: rank %d %s (%s)", lc_rank(), sl_status_name(st), msg);
  for (int i = 0; i < 3; i++)
    CHECKF(!exists(dir, beyond[i]), "overwrite: %s still there", beyond[i]);
  char part0[128];
  snprintf(part0, sizeof part0, "model-rank-%d-part-0.safetensors", lc_rank());
  CHECKF(exists(dir, part0) && exists(dir, "config.json"), "overwrite: %s or the marker missing", part0);
  CHECKF(count_named(dir, ".partial") == 0, "overwrite: temporaries left");
  MPI_Barrier(MPI_COMM_WORLD);
  /* Again over a complete save of this world: every file is replaced, nothing to refuse. */
  st = load_and_save(dir, NULL, msg, sizeof msg);
  CHECKF(st == SL_STATUS_OK, "same world again: rank %d %s (%s)", lc_rank(), sl_status_name(st), msg);
  CHECKF(exists(dir, part0) && exists(dir, "config.json"), "same world again: files missing");
  MPI_Barrier(MPI_COMM_WORLD);
  lc_tmpdir_remove(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  test_injected(lc_world() - 1);
  if (lc_world() > 1)
    test_injected(0);
  test_real_full_disk();
  test_older_save();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
