/*
 * early_device.c — `shardload load --device cuda`: the rank's GPU is made current before MPI_Init.
 * A CUDA-aware MPI creates a CUDA context on the current device while it initializes; without this
 * every rank of a node would put one on GPU 0. The options are read here straight from argv
 * (`--device cuda`, `--device=cuda`, `--cuda-device N`), before the parser, which needs MPI to
 * print its errors once.
 */
#include "cli.h"

#include "shardload/shardload.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The value of option `name` at argv[*i] ("--name value" or "--name=value"), or NULL. */
static const char *value_of(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  const char *a = argv[*i];
  if (strncmp(a, name, n) != 0)
    return NULL;
  if (a[n] == '=')
    return a + n + 1;
  if (a[n] == '\0' && *i + 1 < argc)
    return argv[++*i];
  return NULL;
}

int sl_cli_early_cuda_device(int argc, char **argv) {
  bool cuda = false;
  int requested = -1;
  for (int i = 1; i < argc; i++) {
    const char *v = value_of(argc, argv, &i, "--device");
    if (v != NULL) {
      cuda = strcmp(v, "cuda") == 0;
      continue;
    }
    v = value_of(argc, argv, &i, "--cuda-device");
    if (v != NULL) {
      char *end = NULL;
      long d = strtol(v, &end, 10);
      requested = end != v && *end == '\0' && d >= 0 && d < 1 << 20 ? (int)d : -1;
    }
  }
  int chosen = -1;
  /* A failure (no GPU) is left to the load, which reports it on every rank alike. */
  if (cuda && sl_cuda_select_device(requested, &chosen, NULL) != SL_STATUS_OK)
    chosen = -1;
  return chosen;
}
