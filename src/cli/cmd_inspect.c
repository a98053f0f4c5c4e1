/*
 * cmd_inspect.c — `shardload inspect FILE|DIR [--load-format F] [--json]`: validates every header
 * of a safetensors file or of the weight files a model folder would load, and prints the files,
 * the tensors, totals per dtype and the warnings about the index. Public API only; no MPI.
 *
 * Organisation: a summary pass (tensors per file, bytes per dtype), then one printer for humans
 * and one for --json (with its own string escaping, since the CLI cannot use library internals).
 */
#include "args.h"
#include "cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_DTYPES 64 /* distinct dtype names in one model (22 exist) */

typedef struct dtype_total {
  const char *dtype; /* static string from the library */
  uint64_t tensors;
  uint64_t bytes;
} dtype_total;

typedef struct summary {
  size_t n_files;
  size_t *file_tensors; /* tensors per file */
  bool any_pickle;
  uint64_t total_bytes; /* sum of tensor data bytes */
  size_t n_dtypes;
  dtype_total dtypes[MAX_DTYPES]; /* in order of first appearance */
} summary;

static void usage(FILE *out) {
  fprintf(out,
          "usage: shardload inspect FILE|DIR [--load-format auto|hf|safetensors|mistral|pt] [--json]\n"
          "Reads the header of a safetensors FILE, or of every weight file a load of the model folder DIR\n"
          "would select, strictly validated, and prints the files (path, size, tensor count), one line per\n"
          "tensor (name, dtype, shape, bytes, offset, file), totals per dtype and warnings about the\n"
          "index file. --json prints the same as one JSON object. Exit status: 0 ok, 1 invalid or\n"
          "unreadable input (the message names the file and the error kind), 2 usage error.\n");
  sl_cli_print_options(out, &sl_cli_cmd_inspect);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s);
  size_t k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* A file of the selection written by torch.save (read through its zip directory and pickle). */
static bool is_pickle(const summary *s, const sl_model *m, size_t file) {
  (void)s;
  const char *name = base_name(sl_model_file_path(m, file));
  return ends_with(name, ".bin") || ends_with(name, ".pt") || ends_with(name, ".pth");
}

static bool summarize(const sl_model *m, summary *s) {
  memset(s, 0, sizeof *s);
  s->n_files = sl_model_file_count(m);
  s->file_tensors = calloc(s->n_files + 1, sizeof *s->file_tensors);
  if (s->file_tensors == NULL)
    return false;
  size_t n = sl_model_tensor_count(m);
  for (size_t i = 0; i < n; i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    if (sl_model_tensor(m, i, &t) != SL_STATUS_OK)
      return false;
    if (t.file < s->n_files)
      s->file_tensors[t.file]++;
    s->total_bytes += t.nbytes;
    size_t d = 0;
    while (d < s->n_dtypes && strcmp(s->dtypes[d].dtype, t.dtype) != 0)
      d++;
    if (d == s->n_dtypes) {
      if (d == MAX_DTYPES)
        return false;
      s->dtypes[d].dtype = t.dtype;
      s->n_dtypes++;
    }
    s->dtypes[d].tensors++;
    s->dtypes[d].bytes += t.nbytes;
  }
  for (size_t f = 0; f < s->n_files; f++)
    if (is_pickle(s, m, f))
      s->any_pickle = true;
  return true;
}

/* "[250, 64]"; "[]" for a scalar. */
static void shape_text(const sl_tensor_info *t, char *buf, size_t cap) {
  size_t k = 0;
  int w = snprintf(buf, cap, "[");
  k = w > 0 ? (size_t)w : 0;
  for (uint32_t d = 0; d < t->ndim && k < cap; d++) {
    w = snprintf(buf + k, cap - k, "%s%llu", d > 0 ? ", " : "", (unsigned long long)t->shape[d]);
    k += w > 0 ? (size_t)w : 0;
  }
  if (k < cap)
    snprintf(buf + k, cap - k, "]");
}

/* ---- human output ---- */

static void print_human(const char *path, const char *format, const sl_model *m, const summary *s) {
  printf("path: %s\n", path);
  printf("load format: %s\n", format);
  printf("files: %zu\n", s->n_files);
  for (size_t f = 0; f < s->n_files; f++) {
    printf("  %s  %llu bytes  %zu tensor%s%s\n", sl_model_file_path(m, f),
           (unsigned long long)sl_model_file_size(m, f), s->file_tensors[f],
           s->file_tensors[f] == 1 ? "" : "s", is_pickle(s, m, f) ? "  (pickle)" : "");
  }

  size_t n = sl_model_tensor_count(m);
  int name_w = 4;
  int shape_w = 5;
  char shape[256];
  for (size_t i = 0; i < n; i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    if (sl_model_tensor(m, i, &t) != SL_STATUS_OK)
      continue;
    shape_text(&t, shape, sizeof shape);
    if ((int)strlen(t.name) > name_w)
      name_w = (int)strlen(t.name);
    if ((int)strlen(shape) > shape_w)
      shape_w = (int)strlen(shape);
  }
  printf("tensors: %zu\n", n);
  if (n > 0)
    printf("  %-*s  %-11s  %-*s  %12s  %12s  %s\n", name_w, "NAME", "DTYPE", shape_w, "SHAPE", "BYTES",
           "OFFSET", "FILE");
  for (size_t i = 0; i < n; i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    if (sl_model_tensor(m, i, &t) != SL_STATUS_OK)
      continue;
    shape_text(&t, shape, sizeof shape);
    printf("  %-*s  %-11s  %-*s  %12llu  %12llu  %s\n", name_w, t.name, t.dtype, shape_w, shape,
           (unsigned long long)t.nbytes, (unsigned long long)t.offset,
           base_name(sl_model_file_path(m, t.file)));
  }
  printf("totals: %zu file%s, %zu tensor%s, %llu bytes\n", s->n_files, s->n_files == 1 ? "" : "s", n,
         n == 1 ? "" : "s", (unsigned long long)s->total_bytes);
  for (size_t d = 0; d < s->n_dtypes; d++)
    printf("  %-11s  %8llu %-7s  %14llu bytes\n", s->dtypes[d].dtype,
           (unsigned long long)s->dtypes[d].tensors, s->dtypes[d].tensors == 1 ? "tensor" : "tensors",
           (unsigned long long)s->dtypes[d].bytes);
  const char *warnings = sl_model_warnings(m);
  if (warnings[0] == '\0') {
    printf("warnings: none\n");
    return;
  }
  printf("warnings:\n");
  for (const char *p = warnings; *p != '\0';) {
    const char *nl = strchr(p, '\n');
    size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
    printf("  %.*s\n", (int)len, p);
    p += len;
    if (*p == '\n')
      p++;
  }
}

/* ---- JSON output ---- */

/* Length of the valid UTF-8 sequence at p (strict: no overlongs, surrogates or values above
 * U+10FFFF), 0 when invalid. p[0] >= 0x80. */
static size_t utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  unsigned lo = 0x80;
  unsigned hi = 0xBF;
  size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0)
      lo = 0xA0;
    if (c == 0xED)
      hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0)
      lo = 0x90;
    if (c == 0xF4)
      hi = 0x8F;
  } else {
    return 0;
  }
  if (p[1] < lo || p[1] > hi)
    return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xBF)
      return 0;
  return n;
}

/* s as a JSON string literal; bytes that are not UTF-8 become U+FFFD. */
static void json_str(const char *s) {
  putchar('"');
  const unsigned char *p = (const unsigned char *)s;
  while (*p != '\0') {
    unsigned c = *p;
    if (c == '"' || c == '\\') {
      putchar('\\');
      putchar((int)c);
      p++;
    } else if (c == '\n') {
      fputs("\\n", stdout);
      p++;
    } else if (c == '\t') {
      fputs("\\t", stdout);
      p++;
    } else if (c == '\r') {
      fputs("\\r", stdout);
      p++;
    } else if (c < 0x20) {
      printf("\\u%04x", c);
      p++;
    } else if (c < 0x80) {
      putchar((int)c);
      p++;
    } else {
      size_t n = utf8_len(p);
      if (n == 0) {
        fputs("\\ufffd", stdout);
        p++;
      } else {
        fwrite(p, 1, n, stdout);
        p += n;
      }
    }
  }
  putchar('"');
}

static void json_str_n(const char *s, size_t n) {
  char *copy = malloc(n + 1);
  if (copy == NULL) {
    fputs("\"\"", stdout);
    return;
  }
  memcpy(copy, s, n);
  copy[n] = '\0';
  json_str(copy);
  free(copy);
}

static void print_json(const char *path, const char *format, const sl_model *m, const summary *s) {
  printf("{\n  \"path\": ");
  json_str(path);
  printf(",\n  \"load_format\": ");
  json_str(format);
  printf(",\n  \"files\": [");
  for (size_t f = 0; f < s->n_files; f++) {
    const char *fp = sl_model_file_path(m, f);
    printf("%s\n    {\"path\": ", f > 0 ? "," : "");
    json_str(fp);
    printf(", \"name\": ");
    json_str(base_name(fp));
    printf(", \"size\": %llu, \"tensors\": %zu, \"pickle\": %s}",
           (unsigned long long)sl_model_file_size(m, f), s->file_tensors[f],
           is_pickle(s, m, f) ? "true" : "false");
  }
  printf("%s],\n  \"tensors\": [", s->n_files > 0 ? "\n  " : "");
  size_t n = sl_model_tensor_count(m);
  for (size_t i = 0; i < n; i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    if (sl_model_tensor(m, i, &t) != SL_STATUS_OK)
      continue;
    printf("%s\n    {\"name\": ", i > 0 ? "," : "");
    json_str(t.name);
    printf(", \"dtype\": ");
    json_str(t.dtype);
    printf(", \"shape\": [");
    for (uint32_t d = 0; d < t.ndim; d++)
      printf("%s%llu", d > 0 ? ", " : "", (unsigned long long)t.shape[d]);
    printf("], \"nbytes\": %llu, \"offset\": %llu, \"file\": %zu}", (unsigned long long)t.nbytes,
           (unsigned long long)t.offset, t.file);
  }
  printf("%s],\n  \"totals\": {\"files\": %zu, \"tensors\": %zu, \"bytes\": %llu, \"dtypes\": [",
         n > 0 ? "\n  " : "", s->n_files, n, (unsigned long long)s->total_bytes);
  for (size_t d = 0; d < s->n_dtypes; d++) {
    printf("%s{\"dtype\": ", d > 0 ? ", " : "");
    json_str(s->dtypes[d].dtype);
    printf(", \"tensors\": %llu, \"bytes\": %llu}", (unsigned long long)s->dtypes[d].tensors,
           (unsigned long long)s->dtypes[d].bytes);
  }
  printf("]},\n  \"warnings\": [");
  const char *warnings = sl_model_warnings(m);
  bool first = true;
  for (const char *p = warnings; *p != '\0';) {
    const char *nl = strchr(p, '\n');
    size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
    printf("%s\n    ", first ? "" : ",");
    json_str_n(p, len);
    first = false;
    p += len;
    if (*p == '\n')
      p++;
  }
  printf("%s],\n  \"notes\": [", first ? "" : "\n  ");
  printf("]\n}\n");
}

/* ---- the command ---- */

int sl_cli_inspect(int argc, char **argv) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK) {
    fprintf(stderr, "shardload inspect: out of memory\n");
    return 1;
  }
  sl_cli_args args;
  int rc = sl_cli_parse(argc, argv, cfg, &args, &sl_cli_cmd_inspect);
  if (rc == 0 && args.help) {
    usage(stdout);
    sl_config_destroy(cfg);
    return 0;
  }
  if (rc == 0 && args.positional == NULL) {
    fprintf(stderr, "shardload inspect: expected a safetensors file or a model folder\n");
    usage(stderr);
    rc = 2;
  }
  if (rc != 0) {
    sl_config_destroy(cfg);
    return rc;
  }
  const char *path = args.positional;
  sl_model *m = NULL;
  char *error = NULL;
  sl_status st = sl_model_open(path, cfg, &m, &error);
  if (st != SL_STATUS_OK) {
    fprintf(stderr, "shardload inspect: %s\n", error != NULL ? error : sl_status_message(st));
    free(error);
    sl_config_destroy(cfg);
    return 1;
  }
  const char *format = sl_model_load_format(m);
  summary s;
  if (!summarize(m, &s)) {
    fprintf(stderr, "shardload inspect: %s: cannot summarize the model (out of memory?)\n", path);
    rc = 1;
  } else if (args.json) {
    print_json(path, format, m, &s);
  } else {
    print_human(path, format, m, &s);
  }
  free(s.file_tensors);
  sl_model_close(m);
  sl_config_destroy(cfg);
  if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
    fprintf(stderr, "shardload inspect: cannot write the output\n");
    rc = 1;
  }
  return rc;
}
