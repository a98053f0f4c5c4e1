/*
 * test_gpu_versions_mock.c — what a user is told about the CUDA driver and NCCL versions, against the
 * mock (label gpumock, one rank). Mode (argv[1]):
 *   driver  the mock's driver is older than the runtime (MOCK_CUDA_DEVICES=nodriver: CUDA 12.4 under
 *           a 13.x runtime): a cuda load fails with NO_DEVICE naming both versions and saying the driver
 *           is too old, not that the GPUs are missing;
 *   nodriver no driver at all (MOCK_CUDA_DRIVER_VERSION=0 as well): the message says no driver was found;
 *   nccl    the process runs another NCCL than the one built against (MOCK_NCCL_VERSION=22100): the
 *           load succeeds, and a warning names both versions;
 *   ok      matching versions: an info line names the driver, runtime and NCCL versions, no warning.
 */
#include "check.h"

#include "shardload/shardload.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

static char warnings[4096];
static char infos[4096];

static void on_log(sl_log_level level, int rank, const char *line, void *user) {
  (void)rank;
  (void)user;
  char *to = level == SL_LOG_WARN ? warnings : level == SL_LOG_INFO ? infos : NULL;
  if (to != NULL && strlen(to) + strlen(line) + 2 < sizeof warnings) {
    strcat(to, line);
    strcat(to, "\n");
  }
}

static sl_status load_cuda(sl_loader **out, char *msg, size_t cap) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  CHECK(sl_config_set(cfg, "model", dir) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "device", "cuda") == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "quiet", "true") == SL_STATUS_OK);
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, out);
  snprintf(msg, cap, "%s", st != SL_STATUS_OK ? sl_config_error(cfg) : "");
  sl_config_destroy(cfg);
  if (st == SL_STATUS_OK) {
    st = sl_loader_load(*out);
    snprintf(msg, cap, "%s", st != SL_STATUS_OK ? sl_loader_error(*out) : "");
  }
  return st;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  const char *mode = argc > 1 ? argv[1] : "ok";
  sl_log_set_callback(on_log, NULL);
  sl_log_set_level(SL_LOG_INFO);
  sl_loader *l = NULL;
  char msg[1024] = "";
  sl_status st = load_cuda(&l, msg, sizeof msg);
  if (strcmp(mode, "nodriver") == 0) {
    CHECKF(st == SL_STATUS_NO_DEVICE, "status %s, expected NO_DEVICE: %s", sl_status_name(st), msg);
    CHECKF(strstr(msg, "no NVIDIA driver was found") != NULL && strstr(msg, "too old") == NULL,
           "the message does not say that no driver was found: %s", msg);
  } else if (strcmp(mode, "driver") == 0) {
    CHECKF(st == SL_STATUS_NO_DEVICE, "status %s, expected NO_DEVICE: %s", sl_status_name(st), msg);
    CHECKF(strstr(msg, "driver is too old") != NULL, "the message does not say the driver is too old: %s",
           msg);
    CHECKF(strstr(msg, "CUDA 12.4") != NULL && strstr(msg, "runtime 13.") != NULL,
           "the message does not name the driver's and the runtime's versions: %s", msg);
  } else {
    CHECKF(st == SL_STATUS_OK, "cuda load: %s", msg);
    CHECKF(strstr(infos, "CUDA runtime 13.") != NULL && strstr(infos, "NCCL 2.") != NULL,
           "no info line names the versions: %s", infos);
    if (strcmp(mode, "nccl") == 0)
      CHECKF(strstr(warnings, "runs NCCL 2.21.0") != NULL && strstr(warnings, "built with NCCL 2.") != NULL,
             "no warning names both NCCL versions: %s", warnings);
    else
      CHECKF(strstr(warnings, "NCCL") == NULL, "an unexpected NCCL warning: %s", warnings);
  }
  sl_loader_destroy(l);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
