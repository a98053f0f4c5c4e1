/*
 * model/spec_dirs.c — where architecture specs are looked for (docs/SPECS.md): $SHARDLOAD_SPECS,
 * then the specs bundled with the library, found relative to the library file itself. Used by the
 * search for an architecture's spec (model/spec_find.c) and for the vision specs a spec includes
 * (model/spec_vision.c).
 */
#include "model/spec.h"

#include "base/util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The bundled specs' folder relative to the folder of the library file (CMake computes it from
 * the install directories; the build tree mirrors them), so that neither an installed nor a moved
 * library depends on a path fixed at build time. */
#ifndef SL_SPECS_RELATIVE
#define SL_SPECS_RELATIVE "../share/shardload/specs"
#endif

/* Where the library (or, linked statically, the program) was loaded from: dladdr of an object of
 * this file, else /proc/self/exe. Returns a malloc'd folder, or NULL. */
static char *spec_own_dir(void) {
  static const char anchor = 0;
  Dl_info info;
  char exe[4096];
  const char *file = NULL;
  if (dladdr(&anchor, &info) != 0 && info.dli_fname != NULL && strchr(info.dli_fname, '/') != NULL)
    file = info.dli_fname;
  if (file == NULL) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
      return NULL;
    exe[n] = '\0';
    file = exe;
  }
  const char *slash = strrchr(file, '/');
  size_t len = slash == file ? 1 : (size_t)(slash - file);
  char *dir = malloc(len + 1);
  if (dir != NULL) {
    memcpy(dir, file, len);
    dir[len] = '\0';
  }
  return dir;
}

/* The spec folders, colon-separated, in search order: $SHARDLOAD_SPECS (so that a user's folder
 * can override a bundled spec), then the bundled specs relative to the library (an install
 * prefix's share/shardload/specs), then a `specs` folder beside the library file (where a
 * package that bundles the library puts them, e.g. the Python package: shardload/libshardload.so
 * and shardload/specs/). Caller frees. */
char *sl__spec_search_path(void) {
  sl__buf dirs;
  sl__buf_init(&dirs, 0);
  const char *env = getenv("SHARDLOAD_SPECS");
  if (env != NULL && *env != '\0')
    sl__buf_appendf(&dirs, "%s:", env);
  char *own = spec_own_dir();
  if (own != NULL)
    sl__buf_appendf(&dirs, "%s/%s:%s/specs", own, SL_SPECS_RELATIVE, own);
  free(own);
  return sl__buf_take(&dirs);
}
