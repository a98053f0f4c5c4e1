/*
 * test_file_change.c — a checkpoint shard rewritten in place during a load, at the MPI world size
 * it runs with. Rank 0 copies the llama fixture into a temporary folder; every rank plans (the
 * catalog has recorded the shards' size and times), then loads with every read slowed down
 * (SHARDLOAD_INJECT_READ_DELAY_MS) and save_sharded configured, while a thread of rank 0 rewrites
 * model-00002-of-00003.safetensors in place: same size, a different last byte, a new modification
 * time. Every rank must fail (IO on the ranks that read the file, PEER_FAILED elsewhere), every
 * message naming the file and saying it changed, and the save folder must hold no part file.
 * Before that, a load of the untouched copy succeeds (the check does not fire on its own).
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHARD "model-00002-of-00003.safetensors"

static char *folder;

/* Rank 0's helper: after a moment, the shard's last byte changes and its mtime moves ahead. */
static void *rewrite(void *arg) {
  (void)arg;
  struct timespec pause = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
  nanosleep(&pause, NULL);
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", folder, SHARD);
  int fd = open(path, O_WRONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    CHECKF(false, "cannot open %s for the rewrite", path);
    return NULL;
  }
  unsigned char b = 0x5a;
  CHECK(pwrite(fd, &b, 1, st.st_size - 1) == 1);
  /* A modification time well past the old one, whatever the file system's granularity. */
  struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = st.st_mtim.tv_sec + 5}};
  CHECK(futimens(fd, times) == 0);
  close(fd);
  return NULL;
}

static sl_status load(const char *save_dir, bool rewrite_during, char *msg, size_t cap) {
  sl_config *cfg = NULL;
  sl_loader *l = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char dp[16];
  snprintf(dp, sizeof dp, "%d", lc_world());
  CHECK(sl_config_set(cfg, "model", folder) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "dp", dp) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "threads", "1") == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "quiet", "true") == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "save_sharded", save_dir) == SL_STATUS_OK);
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK)
    st = sl_loader_plan(l);
  pthread_t th;
  bool started = false;
  if (st == SL_STATUS_OK && rewrite_during && lc_rank() == 0)
    started = pthread_create(&th, NULL, rewrite, NULL) == 0;
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  if (started)
    pthread_join(th, NULL);
  snprintf(msg, cap, "%s", l != NULL ? sl_loader_error(l) : sl_config_error(cfg));
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  return st;
}

/* Part files (model-rank-*) in dir. */
static int part_files(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return 0;
  int n = 0;
  for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
    n += strncmp(e->d_name, "model-rank-", 11) == 0;
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  folder = lc_tmpdir("change");
  char src[1024];
  lc_fixture_path("llama", src, sizeof src);
  if (lc_rank() == 0) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s'/", src, folder);
    CHECK(system(cmd) == 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  setenv("SHARDLOAD_INJECT_READ_DELAY_MS", "100", 1);
  char save_ok[2048], save_bad[2048], msg[8192];
  snprintf(save_ok, sizeof save_ok, "%s/out-ok", folder);
  snprintf(save_bad, sizeof save_bad, "%s/out-changed", folder);

  sl_status st = load(save_ok, false, msg, sizeof msg);
  CHECKF(st == SL_STATUS_OK, "untouched copy: %s (%s)", sl_status_name(st), msg);

  double t0 = MPI_Wtime();
  st = load(save_bad, true, msg, sizeof msg);
  double secs = MPI_Wtime() - t0;
  CHECKF(st == SL_STATUS_IO || st == SL_STATUS_PEER_FAILED, "rewritten shard: %s (%s)", sl_status_name(st),
         msg);
  CHECK_CONTAINS(msg, SHARD);
  CHECK_CONTAINS(msg, "changed");
  MPI_Barrier(MPI_COMM_WORLD);
  CHECKF(part_files(save_bad) == 0, "%s holds part files after a failed load", save_bad);
  if (lc_rank() == 0)
    printf("rewritten shard: every rank failed in %.2f s: %s\n", secs, msg);
  lc_tmpdir_remove(folder);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
