/*
 * usage_once.c — usage errors printed once across the ranks of a job (see usage_once.h). The
 * parser writes its messages to stderr as it finds them; while it runs, stderr is a temporary
 * file, read back after, so that the ranks can compare what they would have said before anyone
 * says it. The documentation's promise: each distinct cause is printed once.
 */
#include "usage_once.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define USAGE_MSG_MAX 4096 /* bytes of one rank's usage message compared and printed */

/* sl_cli_parse with stderr caught into msg (NUL-terminated, cut at USAGE_MSG_MAX - 1 bytes); when no
 * temporary file can be made, the parser prints as it goes and msg stays empty. */
static int parse_caught(int argc, char **argv, sl_config *config, sl_cli_args *args,
                        const sl_cli_command *cmd, char *msg) {
  msg[0] = '\0';
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = tmp != NULL ? dup(STDERR_FILENO) : -1;
  if (saved < 0 || dup2(fileno(tmp), STDERR_FILENO) < 0) {
    if (saved >= 0)
      close(saved);
    if (tmp != NULL)
      fclose(tmp);
    return sl_cli_parse(argc, argv, config, args, cmd);
  }
  int rc = sl_cli_parse(argc, argv, config, args, cmd);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  rewind(tmp);
  size_t n = fread(msg, 1, USAGE_MSG_MAX - 1, tmp);
  msg[n] = '\0';
  fclose(tmp);
  return rc;
}

int sl_cli_parse_once(MPI_Comm comm, int argc, char **argv, sl_config *config, sl_cli_args *args,
                      const sl_cli_command *cmd) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char mine[USAGE_MSG_MAX] = "";
  char first[USAGE_MSG_MAX];
  int rc = config != NULL ? parse_caught(argc, argv, config, args, cmd, mine) : 1;
  memcpy(first, mine, USAGE_MSG_MAX);
  MPI_Bcast(first, USAGE_MSG_MAX, MPI_CHAR, 0, comm);
  if (rank == 0)
    fputs(mine, stderr);
  else if (strcmp(mine, first) != 0)
    fprintf(stderr, "[rank %d] %s", rank, mine);
  fflush(stderr);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, comm);
  return worst;
}
