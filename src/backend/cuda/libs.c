/*
 * backend/cuda/libs.c — opens the CUDA runtime and NCCL at run time and fills the tables of libs.h.
 * Each library is opened once per process (pthread_once): the first answer, success or the message
 * of a failure, is every later caller's. Order of the search (libs.h): the library named in the
 * environment, one the process already holds (by soname with RTLD_NOLOAD, then any loaded object
 * whose name starts like it, which finds torch's renamed copies), then the loader's search path. A
 * library that cannot be used is said in so many words: which names were tried and dlerror()'s
 * answer for each, what is missing from it, what version is needed.
 */
#include "backend/cuda/libs.h"

#include "backend/cuda/cuda_backend.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* process-wide: the runtime's functions, filled once (open_runtime_once), read-only after. */
sl__cudart sl__cu;
/* process-wide: NCCL's functions, filled once (open_nccl_once), read-only after. */
sl__nccl_api sl__nc;

/* The runtimes tried, newest first; their symbols' version nodes are these names. */
static const char *const runtime_names[] = {"libcudart.so.13", "libcudart.so.12"};
enum { N_RUNTIMES = sizeof runtime_names / sizeof runtime_names[0] };
static const char *const nccl_name = "libnccl.so.2";

typedef struct open_result {
  pthread_once_t once;
  sl_status status;
  char msg[SL_ERR_MSG_MAX];
} open_result;

/* process-wide: the first answer of opening the runtime, every later caller's. */
static open_result runtime_result = {.once = PTHREAD_ONCE_INIT};
/* process-wide: the first answer of opening NCCL, as the runtime's. */
static open_result nccl_result = {.once = PTHREAD_ONCE_INIT};

/* A symbol of h: the definition of version node `node` first (NULL: none), else the default one. */
static void *lookup(void *h, const char *name, const char *node) {
  void *p = node != NULL ? dlvsym(h, name, node) : NULL;
  if (p == NULL)
    p = dlsym(h, name);
  return p;
}

/* The file a symbol of a loaded library came from. */
static void path_of(const void *sym, char *out, size_t cap) {
  Dl_info info;
  memset(&info, 0, sizeof info);
  if (sym != NULL && dladdr(sym, &info) != 0 && info.dli_fname != NULL)
    snprintf(out, cap, "%s", info.dli_fname);
  else
    snprintf(out, cap, "?");
}

/* ---- loaded objects whose file name starts with a prefix (torch's libcudart-<hash>.so.12) ---- */

typedef struct find_loaded {
  const char *prefix; /* "libcudart" */
  const char *next;   /* the characters that may follow it: ".-" (libcudart-<hash>.so.12) */
  char path[512];
} find_loaded;

static int match_loaded(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  find_loaded *f = data;
  const char *name = info->dlpi_name;
  if (name == NULL || *name == '\0')
    return 0;
  const char *base = strrchr(name, '/');
  base = base != NULL ? base + 1 : name;
  size_t n = strlen(f->prefix);
  if (strncmp(base, f->prefix, n) != 0 || base[n] == '\0' || strchr(f->next, base[n]) == NULL ||
      strstr(base, ".so") == NULL)
    return 0;
  snprintf(f->path, sizeof f->path, "%s", name);
  return 1;
}

/* A handle on a library the process already holds: by one of `names`, else by the start of its file
 * name (`prefix`, then one of `next`). */
static void *already_loaded(const char *const *names, int n, const char *prefix, const char *next) {
  for (int i = 0; i < n; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL)
      return h;
  }
  find_loaded f = {.prefix = prefix, .next = next};
  if (dl_iterate_phdr(match_loaded, &f) != 0)
    return dlopen(f.path, RTLD_NOW | RTLD_NOLOAD);
  return NULL;
}

/* ---- the runtime ---- */

/* The runtime's CUDA version and the driver's, asked of a candidate (0 when it cannot say). */
static void probe_runtime(void *h, const char *node, int *runtime, int *driver) {
  __typeof__(cudaRuntimeGetVersion) *rt =
      (__typeof__(cudaRuntimeGetVersion) *)lookup(h, "cudaRuntimeGetVersion", node);
  __typeof__(cudaDriverGetVersion) *dr =
      (__typeof__(cudaDriverGetVersion) *)lookup(h, "cudaDriverGetVersion", node);
  *runtime = 0;
  *driver = 0;
  if (rt == NULL || rt(runtime) != cudaSuccess)
    *runtime = 0;
  if (dr == NULL || dr(driver) != cudaSuccess)
    *driver = 0;
}

/* The version node of a runtime's symbols: "libcudart.so.<major>". */
static void node_of(int version, char *out, size_t cap) {
  snprintf(out, cap, "libcudart.so.%d", version / 1000);
}

/* Fills sl__cu from handle h (kept open for the life of the process). */
static sl_status bind_runtime(void *h, bool preloaded, sl__err *err) {
  int version = 0;
  int driver = 0;
  probe_runtime(h, NULL, &version, &driver);
  char node[32];
  node_of(version, node, sizeof node);
  memset(&sl__cu, 0, sizeof sl__cu);
  const char *missing = NULL;
  /* POSIX: a data pointer from dlsym converts to a function pointer (memcpy keeps -Wpedantic quiet). */
#define SL_BIND_CUDART(f)                                                                                    \
  do {                                                                                                       \
    void *p_ = lookup(h, #f, node);                                                                          \
    if (p_ == NULL && missing == NULL)                                                                       \
      missing = #f;                                                                                          \
    memcpy(&sl__cu.f, &p_, sizeof p_);                                                                       \
  } while (0);
  SL_CUDART_FUNCS(SL_BIND_CUDART)
#undef SL_BIND_CUDART
  void *by_version = lookup(h, "cudaGetDriverEntryPointByVersion", node);
  void *entry = lookup(h, "cudaGetDriverEntryPoint", node);
  memcpy(&sl__cu.cudaGetDriverEntryPointByVersion, &by_version, sizeof by_version);
  memcpy(&sl__cu.cudaGetDriverEntryPoint, &entry, sizeof entry);
  path_of(lookup(h, "cudaRuntimeGetVersion", node), sl__cu.path, sizeof sl__cu.path);
  if (missing != NULL || version < 12000) {
    char path[512];
    snprintf(path, sizeof path, "%s", sl__cu.path);
    memset(&sl__cu, 0, sizeof sl__cu);
    if (missing != NULL)
      return sl__err_set(err, SL_STATUS_NO_DEVICE,
                         "the CUDA runtime at %s has no %s: it is not a CUDA 12 or 13 runtime (set %s to "
                         "one, or use --device cpu)",
                         path, missing, SL_CUDART_ENV);
    return sl__err_set(err, SL_STATUS_NO_DEVICE,
                       "the CUDA runtime at %s is CUDA %d.%d: shardload needs CUDA 12 or 13 (set %s to "
                       "such a libcudart, or use --device cpu)",
                       path, version / 1000, version % 1000 / 10, SL_CUDART_ENV);
  }
  sl__cu.version = version;
  sl__cu.driver_version = driver;
  sl__cu.preloaded = preloaded;
  return SL_STATUS_OK;
}

/* Opens every candidate, keeps the one the driver can run (sl__cuda_pick_runtime), closes the rest. */
static sl_status search_runtime(sl__err *err) {
  void *h[N_RUNTIMES] = {NULL};
  int versions[N_RUNTIMES] = {0};
  char why[N_RUNTIMES][200];
  int driver = 0;
  for (int i = 0; i < N_RUNTIMES; i++) {
    h[i] = dlopen(runtime_names[i], RTLD_NOW | RTLD_LOCAL);
    const char *e = h[i] == NULL ? dlerror() : NULL;
    snprintf(why[i], sizeof why[i], "%s", e != NULL ? e : "not found");
    if (h[i] == NULL)
      continue;
    int d = 0;
    probe_runtime(h[i], runtime_names[i], &versions[i], &d);
    driver = d > driver ? d : driver;
  }
  int pick = sl__cuda_pick_runtime(versions, N_RUNTIMES, driver);
  for (int i = 0; i < N_RUNTIMES; i++)
    if (h[i] != NULL && i != pick)
      dlclose(h[i]);
  if (pick < 0)
    return sl__err_set(err, SL_STATUS_NO_DEVICE,
                       "device cuda: the CUDA runtime was not found (%s: %s; %s: %s): install the CUDA 12 or "
                       "13 runtime (the CUDA toolkit, or pip's nvidia-cuda-runtime-cu12), add its folder to "
                       "LD_LIBRARY_PATH or name the library in %s; or use --device cpu",
                       runtime_names[0], why[0], runtime_names[1], why[1], SL_CUDART_ENV);
  return bind_runtime(h[pick], false, err);
}

static void open_runtime_once(void) {
  sl__err err;
  sl__err_clear(&err);
  sl_status st = SL_STATUS_OK;
  const char *env = getenv(SL_CUDART_ENV);
  void *h = NULL;
  if (env != NULL && *env != '\0') {
    h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      const char *e = dlerror();
      st = sl__err_set(&err, SL_STATUS_NO_DEVICE,
                       "device cuda: %s=%s cannot be opened: %s; or use --device cpu", SL_CUDART_ENV, env,
                       e != NULL ? e : "?");
    } else {
      st = bind_runtime(h, false, &err);
    }
  } else if ((h = already_loaded(runtime_names, N_RUNTIMES, "libcudart", ".-")) != NULL) {
    st = bind_runtime(h, true, &err);
  } else {
    st = search_runtime(&err);
  }
  runtime_result.status = st;
  snprintf(runtime_result.msg, sizeof runtime_result.msg, "%s", err.msg);
}

sl_status sl__cuda_runtime_open(sl__err *err) {
  pthread_once(&runtime_result.once, open_runtime_once);
  if (runtime_result.status == SL_STATUS_OK)
    return SL_STATUS_OK;
  return sl__err_set(err, runtime_result.status, "%s", runtime_result.msg);
}

bool sl__cuda_runtime_ready(void) {
  return sl__cu.cudaRuntimeGetVersion != NULL;
}

/* ---- NCCL ---- */

static sl_status bind_nccl(void *h, bool preloaded, sl__err *err) {
  memset(&sl__nc, 0, sizeof sl__nc);
  const char *missing = NULL;
#define SL_BIND_NCCL(f)                                                                                      \
  do {                                                                                                       \
    void *p_ = dlsym(h, #f);                                                                                 \
    if (p_ == NULL && missing == NULL)                                                                       \
      missing = #f;                                                                                          \
    memcpy(&sl__nc.f, &p_, sizeof p_);                                                                       \
  } while (0);
  SL_NCCL_FUNCS(SL_BIND_NCCL)
#undef SL_BIND_NCCL
  char path[512];
  path_of(dlsym(h, "ncclGetVersion"), path, sizeof path);
  int version = 0;
  if (sl__nc.ncclGetVersion == NULL || sl__nc.ncclGetVersion(&version) != ncclSuccess)
    version = 0;
  if (missing != NULL || version < SL_NCCL_MIN_VERSION) {
    memset(&sl__nc, 0, sizeof sl__nc);
    char v[32];
    sl__nccl_version_text(version, v, sizeof v);
    return sl__err_set(err, SL_STATUS_NCCL,
                       "the NCCL at %s (version %s%s%s) is too old: shardload needs NCCL 2.18 or newer "
                       "(set %s to a newer libnccl.so.2)",
                       path, v, missing != NULL ? ", no " : "", missing != NULL ? missing : "", SL_NCCL_ENV);
  }
  sl__nc.version = version;
  sl__nc.preloaded = preloaded;
  snprintf(sl__nc.path, sizeof sl__nc.path, "%s", path);
  return SL_STATUS_OK;
}

static void open_nccl_once(void) {
  sl__err err;
  sl__err_clear(&err);
  sl_status st = SL_STATUS_OK;
  const char *env = getenv(SL_NCCL_ENV);
  bool named = env != NULL && *env != '\0';
  void *h = named ? NULL : already_loaded(&nccl_name, 1, "libnccl", ".");
  bool preloaded = h != NULL;
  if (h == NULL)
    h = dlopen(named ? env : nccl_name, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    st = sl__err_set(&err, SL_STATUS_NCCL,
                     "device cuda: NCCL was not found (%s: %s): broadcasts between GPUs need NCCL 2.18 or "
                     "newer (the CUDA toolkit's, or pip's nvidia-nccl-cu12): add its folder to "
                     "LD_LIBRARY_PATH or name the library in %s",
                     named ? env : nccl_name, e != NULL ? e : "not found", SL_NCCL_ENV);
  } else {
    st = bind_nccl(h, preloaded, &err);
  }
  nccl_result.status = st;
  snprintf(nccl_result.msg, sizeof nccl_result.msg, "%s", err.msg);
}

sl_status sl__nccl_open(sl__err *err) {
  pthread_once(&nccl_result.once, open_nccl_once);
  if (nccl_result.status == SL_STATUS_OK)
    return SL_STATUS_OK;
  return sl__err_set(err, nccl_result.status, "%s", nccl_result.msg);
}

bool sl__nccl_ready(void) {
  return sl__nc.ncclGetVersion != NULL;
}

void sl__cuda_libs_describe(char *out, size_t cap) {
  char nccl[600];
  if (sl__nccl_ready())
    snprintf(nccl, sizeof nccl, "NCCL at %s%s", sl__nc.path, sl__nc.preloaded ? " (the process's)" : "");
  else
    snprintf(nccl, sizeof nccl, "NCCL not loaded");
  if (!sl__cuda_runtime_ready()) {
    snprintf(out, cap, "no CUDA runtime loaded; %s", nccl);
    return;
  }
  snprintf(out, cap, "CUDA runtime at %s%s, driver entry points from %s; %s", sl__cu.path,
           sl__cu.preloaded ? " (the process's)" : "",
           sl__cu.cudaGetDriverEntryPointByVersion != NULL ? "cudaGetDriverEntryPointByVersion"
           : sl__cu.cudaGetDriverEntryPoint != NULL        ? "cudaGetDriverEntryPoint"
                                                           : "nowhere",
           nccl);
}
