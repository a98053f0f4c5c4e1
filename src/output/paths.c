/*
 * output/paths.c — output paths made ready before a load reads anything (see output/paths.h).
 */
#include "output/paths.h"

#include "base/util.h"
#include "output/save.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sl_status sl__output_dir_ready(const char *dir, const char *what, sl__err *err) {
  sl__err made;
  sl__err_clear(&made);
  if (sl__mkdirs(dir, &made) != SL_STATUS_OK)
    return sl__err_set(err, SL_STATUS_IO, "%s: %s", what, made.msg);
  /* A probe, not access(2): root passes every permission check, and a read-only mount or a full
   * file system shows only when something is created. */
  char *probe = sl__asprintf("%s/.shardload-probe-XXXXXX", dir);
  if (probe == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  int fd = mkstemp(probe);
  sl_status st = SL_STATUS_OK;
  if (fd < 0) {
    st = sl__err_set(err, SL_STATUS_IO, "%s: cannot write into folder %s: %s", what, dir, strerror(errno));
  } else {
    close(fd);
    unlink(probe);
  }
  free(probe);
  return st;
}

sl_status sl__output_file_ready(const char *path, const char *what, sl__err *err) {
  struct stat st;
  if (path[0] == '\0')
    return sl__err_set(err, SL_STATUS_IO, "%s: the path is empty", what);
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return sl__err_set(err, SL_STATUS_IO, "%s: %s is a folder, not a file", what, path);
    /* Opened without O_TRUNC or O_CREAT: a report of an earlier load stays until this one is written. */
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      return sl__err_set(err, SL_STATUS_IO, "%s: cannot write %s: %s", what, path, strerror(errno));
    close(fd);
    return SL_STATUS_OK;
  }
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    return sl__output_dir_ready(".", what, err);
  char *dir = slash == path ? sl__strdup("/") : sl__strndup(path, (size_t)(slash - path));
  if (dir == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl_status s = sl__output_dir_ready(dir, what, err);
  free(dir);
  return s;
}
