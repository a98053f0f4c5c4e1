/*
 * load_params.c — the smallest program that uses libshardload: every rank of an MPI job loads its
 * share of a model (tensor parallel over all ranks unless --tp/--pp/--dp say otherwise) and walks
 * its table of local parameters. Build it against an installed shardload with the CMakeLists.txt
 * beside it, or: cc load_params.c $(pkg-config --cflags --libs shardload) -o load_params
 * Run: mpirun -np 2 ./load_params /path/to/model [key=value ...]   (configuration keys, e.g.
 * staging_bytes=256M)
 */
#include <shardload/shardload.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  /* The library calls MPI from the thread that calls it: FUNNELED is enough. */
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2) {
    if (rank == 0)
      fprintf(stderr, "usage: mpirun -np N %s MODEL [key=value ...]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }

  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", argv[1]);
  char tp[16];
  snprintf(tp, sizeof tp, "%d", size); /* default: tensor parallel over every rank */
  sl_config_set(cfg, "tp", tp);
  sl_config_set(cfg, "quiet", "true");
  int rc = 0;
  for (int i = 2; i < argc && rc == 0; i++) {
    char key[64];
    const char *eq = strchr(argv[i], '=');
    if (eq == NULL || (size_t)(eq - argv[i]) >= sizeof key) {
      fprintf(stderr, "rank %d: expected key=value, got '%s'\n", rank, argv[i]);
      rc = 2;
      break;
    }
    memcpy(key, argv[i], (size_t)(eq - argv[i]));
    key[eq - argv[i]] = '\0';
    if (sl_config_set(cfg, key, eq + 1) != SL_STATUS_OK) {
      fprintf(stderr, "rank %d: %s\n", rank, sl_config_error(cfg));
      rc = 2;
    }
  }

  sl_loader *loader = NULL;
  if (rc == 0 && sl_loader_create(cfg, MPI_COMM_WORLD, &loader) != SL_STATUS_OK) { /* collective */
    fprintf(stderr, "rank %d: %s\n", rank, sl_config_error(cfg));
    rc = 1;
  }
  if (rc == 0 && sl_loader_load(loader) != SL_STATUS_OK) { /* collective */
    fprintf(stderr, "rank %d: %s\n", rank, sl_loader_error(loader));
    rc = 1;
  }
  if (rc == 0) {
    /* The table and the bytes belong to the loader until sl_loader_destroy. */
    uint64_t bytes = 0;
    uint64_t checksum = 0;
    size_t n = sl_loader_param_count(loader);
    for (size_t i = 0; i < n; i++) {
      const sl_param *p = sl_loader_param(loader, i);
      bytes += p->nbytes;
      if (p->device < 0 && p->alias_of == NULL) /* host memory: the bytes can be read here */
        for (uint64_t b = 0; b < p->nbytes; b++)
          checksum = checksum * 31 + ((const unsigned char *)p->data)[b];
    }
    const sl_param *first = n > 0 ? sl_loader_param(loader, 0) : NULL;
    printf("rank %d/%d: %zu parameters, %llu bytes, checksum %016llx; first: %s %s (%s)\n", rank, size, n,
           (unsigned long long)bytes, (unsigned long long)checksum, first != NULL ? first->name : "-",
           first != NULL ? first->dtype : "-", first != NULL ? first->shard : "-");
  }
  sl_loader_destroy(loader); /* collective; NULL is a no-op */
  sl_config_destroy(cfg);
  MPI_Finalize();
  return rc;
}
