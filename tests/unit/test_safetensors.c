/*
 * test_safetensors.c — the strict safetensors reader and the byte-exact writer (docs/spec/SAFETENSORS.md).
 *
 *   rows_*          every row 1–50 of the docs/spec/SAFETENSORS.md §7 checklist as in-memory bytes with its
 *                   expected status (OK rows also check names, dtypes, shapes and offsets), plus more
 *                   defects;
 *   test_files      some rows again through sl__st_read_file, I/O errors, a header-only sparse file;
 *   test_goldens    every writer golden of docs/spec/SAFETENSORS.md §6 byte for byte (header, file) and
 *                   parsed back;
 *   test_refusals   what the writer refuses, leaving nothing behind;
 *   test_roundtrip  seeded random tables: write → read → same table, rewrite → same bytes.
 */
#include "base/clock.h"
#include "base/util.h"
#include "check.h"
#include "format/safetensors.h"
#include "format/safetensors_write.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define U64MAX 18446744073709551615ULL

static int n_defects; /* distinct defective inputs checked */
static char *tmpdir;

/* ---- building inputs ---- */

static void put_le64(sl__buf *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++)
    x[i] = (uint8_t)(v >> (8 * i));
  sl__buf_append(b, x, 8);
}

static void put_zeros(sl__buf *b, size_t k) {
  for (size_t i = 0; i < k; i++)
    sl__buf_putc(b, '\0');
}

/* LE64(len) + hdr + Z×k. */
static sl__buf hz_n(const char *hdr, size_t len, size_t k) {
  sl__buf b;
  sl__buf_init(&b, 0);
  put_le64(&b, len);
  sl__buf_append(&b, hdr, len);
  put_zeros(&b, k);
  return b;
}

static sl__buf hz(const char *hdr, size_t k) {
  return hz_n(hdr, strlen(hdr), k);
}

/* Raw bytes. */
static sl__buf raw(const void *p, size_t n) {
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__buf_append(&b, p, n);
  return b;
}

/* Literal with embedded NULs: H(s) + Z×k. */
#define HZL(lit, k) hz_n(lit, sizeof(lit) - 1, k)

/* `"name":{"dtype":"DT","shape":SHAPE,"data_offsets":[b,e]}` appended to b (with a leading ','
 * unless first). */
static void put_tensor(sl__buf *b, bool first, const char *name, const char *dt, const char *shape,
                       uint64_t begin, uint64_t end) {
  sl__buf_appendf(b, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                  first ? "" : ",", name, dt, shape, begin, end);
}

/* ---- checking verdicts ---- */

typedef struct want_tensor {
  const char *name;
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[SL_ST_MAX_DIMS];
  uint64_t begin;
  uint64_t end;
} want_tensor;

static void check_table(const char *what, const sl__st_header *h, const want_tensor *w, size_t n) {
  CHECKF(h->n_tensors == n, "%s: %zu tensors, expected %zu", what, h->n_tensors, n);
  for (size_t i = 0; i < n && i < h->n_tensors; i++) {
    const sl__st_tensor *t = &h->tensors[i];
    CHECKF(t->name_len == strlen(w[i].name) && memcmp(t->name, w[i].name, t->name_len) == 0 &&
               t->name[t->name_len] == '\0',
           "%s: tensor %zu is '%s', expected '%s'", what, i, t->name, w[i].name);
    CHECKF(t->dtype == w[i].dtype, "%s: tensor %zu dtype %s, expected %s", what, i, sl__dtype_name(t->dtype),
           sl__dtype_name(w[i].dtype));
    CHECKF(t->ndim == w[i].ndim, "%s: tensor %zu ndim %u, expected %u", what, i, t->ndim, w[i].ndim);
    for (uint32_t d = 0; d < w[i].ndim && d < SL_ST_MAX_DIMS; d++)
      CHECKF(t->shape[d] == w[i].shape[d], "%s: tensor %zu shape[%u] = %" PRIu64 ", expected %" PRIu64, what,
             i, d, t->shape[d], w[i].shape[d]);
    CHECKF(t->begin == w[i].begin && t->end == w[i].end,
           "%s: tensor %zu offsets [%" PRIu64 ",%" PRIu64 "], expected [%" PRIu64 ",%" PRIu64 "]", what, i,
           t->begin, t->end, w[i].begin, w[i].end);
  }
}

/* Parses b (the whole file in memory) and checks the status. For errors, the message must name the
 * file (`what`) and, when given, the tensor. On OK and h != NULL, *h is left for the caller. Frees b. */
static void expect_h(const char *what, sl__buf *b, sl_status want, const char *tensor, sl__st_header *h) {
  sl__st_header local;
  sl__err err;
  sl__err_clear(&err);
  const uint8_t *p = b->data != NULL ? (const uint8_t *)b->data : (const uint8_t *)"";
  sl_status st = sl__st_parse(p, b->len, b->len, what, &local, &err);
  CHECKF(st == want, "%s: status %s, expected %s (%s)", what, sl_status_name(st), sl_status_name(want),
         err.msg);
  if (want != SL_STATUS_OK) {
    n_defects++;
    CHECK_CONTAINS(err.msg, what);
    if (tensor != NULL) {
      char quoted[256];
      snprintf(quoted, sizeof quoted, "'%s'", tensor);
      CHECK_CONTAINS(err.msg, quoted);
    }
    CHECKF(local.n_tensors == 0 && local.tensors == NULL && local.strings == NULL, "%s: output not zeroed",
           what);
  }
  if (st == SL_STATUS_OK && h != NULL)
    *h = local;
  else
    sl__st_header_free(&local);
  sl__buf_free(b);
}

static void expect(const char *what, sl__buf b, sl_status want, const char *tensor) {
  expect_h(what, &b, want, tensor, NULL);
}

/* Parses an OK file and checks its table. */
static void expect_ok(const char *what, sl__buf b, const want_tensor *w, size_t n) {
  sl__st_header h;
  memset(&h, 0, sizeof h);
  expect_h(what, &b, SL_STATUS_OK, NULL, &h);
  if (h.tensors != NULL || h.strings != NULL)
    check_table(what, &h, w, n);
  sl__st_header_free(&h);
}

#define OK_HDR(what, hdr, k, ...)                                                                            \
  do {                                                                                                       \
    const want_tensor w_[] = {__VA_ARGS__};                                                                  \
    expect_ok(what, hz(hdr, k), w_, sizeof w_ / sizeof w_[0]);                                               \
  } while (0)

/* ---- docs/spec/SAFETENSORS.md §7 rows ---- */

#define T60 "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}"

static void rows_length(void) {
  expect("row 1", raw("", 0), SL_STATUS_ST_HEADER_TOO_SMALL, NULL);
  expect("row 2", raw("\x08\0\0\0\0\0\0", 7), SL_STATUS_ST_HEADER_TOO_SMALL, NULL);
  expect("row 3", raw("\x3c\0\0\0\0\xff\xff\xff{}xx", 12), SL_STATUS_ST_HEADER_TOO_LARGE, NULL);
  sl__buf b;
  sl__buf_init(&b, 0);
  put_le64(&b, 200000000);
  put_zeros(&b, 10);
  expect("row 4", b, SL_STATUS_ST_HEADER_TOO_LARGE, NULL);
  sl__buf_init(&b, 0);
  put_le64(&b, U64MAX);
  expect("row 5", b, SL_STATUS_ST_HEADER_TOO_LARGE, NULL);
  sl__buf_init(&b, 0);
  put_le64(&b, 100000000);
  put_zeros(&b, 10);
  expect("row 6", b, SL_STATUS_ST_HEADER_LENGTH, NULL);
  expect("row 7", raw("\x3c\0\0\0\0\0\0\0", 8), SL_STATUS_ST_HEADER_LENGTH, NULL);
  sl__buf_init(&b, 0);
  put_le64(&b, 100000001);
  expect("N = 1e8 + 1", b, SL_STATUS_ST_HEADER_TOO_LARGE, NULL);
  expect("row 8", raw("\x01\0\0\0\0\0\0\0\xff", 9), SL_STATUS_ST_HEADER_UTF8, NULL);
  expect("row 9", raw("\x01\0\0\0\0\0\0\0{", 9), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 10", raw("\0\0\0\0\0\0\0\0", 8), SL_STATUS_ST_HEADER_JSON, NULL);
}

static void rows_basic(void) {
  CHECK_EQ_U64(strlen(T60), 60);
  OK_HDR("row 11", T60, 16, {"test", SL_DT_I32, 2, {2, 2}, 0, 16});
  sl__buf b = hz(T60, 16);
  sl__buf_append(&b, "extra_bogus_data_for_polyglot_file", 34);
  expect("row 12", b, SL_STATUS_ST_INCOMPLETE, NULL);
  expect("row 13", hz(T60, 14), SL_STATUS_ST_INCOMPLETE, NULL);
  const char *r14 = "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0, 4]}}";
  CHECK_EQ_U64(strlen(r14), 60);
  expect("row 14", hz(r14, 0), SL_STATUS_ST_TENSOR_INFO, "test");
  const char *r15 =
      "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,18446744073709551614],\"data_offsets\":[0,16]}}";
  CHECK_EQ_U64(strlen(r15), 79);
  expect("row 15", hz(r15, 16), SL_STATUS_ST_OVERFLOW, "test");
  const char *r16 =
      "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,9223372036854775807],\"data_offsets\":[0,16]}}";
  CHECK_EQ_U64(strlen(r16), 78);
  expect("row 16", hz(r16, 16), SL_STATUS_ST_OVERFLOW, "test");

  sl__buf h;
  sl__buf_init(&h, 0);
  sl__buf_putc(&h, '{');
  for (int i = 0; i < 10; i++) {
    char name[16];
    snprintf(name, sizeof name, "weight_%d", i);
    put_tensor(&h, i == 0, name, "F32", "[2,2]", 0, 16);
  }
  sl__buf_putc(&h, '}');
  expect("row 17", hz(h.data, 16), SL_STATUS_ST_INVALID_OFFSET, "weight_1");
  sl__buf_free(&h);

  OK_HDR("row 18", "{\"test\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
         {"test", SL_DT_I32, 0, {0}, 0, 4});
  OK_HDR("row 19", "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,0],\"data_offsets\":[0, 0]}}", 0,
         {"test", SL_DT_I32, 2, {2, 0}, 0, 0});
  expect_ok("row 20", HZL("{}\r \t\n", 0), NULL, 0);
  expect_ok("row 21", HZL("\t\n{}\r ", 0), NULL, 0);
  expect("row 22", hz("{}", 1), SL_STATUS_ST_INCOMPLETE, NULL);
}

static void rows_syntax(void) {
  expect("row 23 NUL", HZL("{}\0\0", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 23 VT", HZL("{}\x0b", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 23 FF", HZL("{}\x0c", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 23 x", HZL("{} x", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 23 comment", HZL("{}/**/", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 24", HZL("\xef\xbb\xbf{}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 25", HZL("{}\xff", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
  expect("leading VT", HZL("\x0b{}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("leading NUL", HZL("\0{}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("two objects", hz("{}{}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("whitespace only", hz("    ", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("unterminated object", hz("{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("trailing comma top", hz("{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("trailing comma shape", hz("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("trailing comma tensor", hz("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("single quotes", hz("{'a':{}}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("missing colon", hz("{\"a\" {}}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("unterminated string", hz("{\"abc", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  /* UTF-8 defects of step 4 (overlong, surrogate, above U+10FFFF, truncated, stray continuation). */
  expect("overlong C0 80", HZL("{\"\xc0\x80\":0}", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
  expect("overlong E0 80 80", HZL("{\"\xe0\x80\x80\":0}", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
  expect("surrogate ED A0 80", HZL("{\"\xed\xa0\x80\":0}", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
  expect("above U+10FFFF", HZL("{\"\xf4\x90\x80\x80\":0}", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
  expect("truncated E2 82", HZL("{}  \xe2\x82", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
  expect("stray continuation", HZL("{\"\x80\":0}", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
  /* UTF-8 beats JSON (step 4 before 5). */
  expect("utf8 before json", HZL("[\xff", 0), SL_STATUS_ST_HEADER_UTF8, NULL);
}

static void rows_metadata(void) {
  expect_ok("row 26 null", hz("{\"__metadata__\":null}", 0), NULL, 0);
  expect_ok("row 26 {}", hz("{\"__metadata__\":{}}", 0), NULL, 0);
  expect("row 27 number", hz("{\"__metadata__\":{\"x\":1}}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 27 string", hz("{\"__metadata__\":\"str\"}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 28", hz("{\"__metadata__\":{},\"__metadata__\":{}}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("metadata null twice", hz("{\"__metadata__\":null,\"__metadata__\":null}", 0),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("metadata null value", hz("{\"__metadata__\":{\"x\":null}}", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("metadata array", hz("{\"__metadata__\":[]}", 0), SL_STATUS_ST_HEADER_JSON, NULL);

  /* Repeated key keeps the last value; keys sorted; escapes decoded; any position. */
  sl__st_header h;
  memset(&h, 0, sizeof h);
  sl__buf b = hz("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                 "\"__metadata__\":{\"b\":\"1\",\"format\":\"pt\",\"b\":\"3\",\"\\u00e9\\n\":\"x\\\"y\\/\"}}",
                 1);
  uint64_t header_len = b.len - 9;
  expect_h("metadata table", &b, SL_STATUS_OK, NULL, &h);
  CHECK_EQ_U64(h.n_meta, 3);
  if (h.n_meta == 3) {
    CHECK_STR(h.meta[0].key, "b");
    CHECK_STR(h.meta[0].value, "3");
    CHECK_STR(h.meta[1].key, "format");
    CHECK_STR(h.meta[1].value, "pt");
    CHECK_STR(h.meta[2].key, "\xc3\xa9\n");
    CHECK_STR(h.meta[2].value, "x\"y/");
  }
  CHECK_EQ_U64(h.n_tensors, 1);
  CHECK_EQ_U64(h.header_len, header_len);
  sl__st_header_free(&h);
}

static void rows_schema(void) {
  const char *a2 = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  char hdr[512];
  snprintf(hdr, sizeof hdr, "{%s,%s}", a2, a2);
  expect("row 29", hz(hdr, 8), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 30",
         hz("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("shape twice",
         hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("offsets twice",
         hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"data_offsets\":[0,8]}}", 8),
         SL_STATUS_ST_HEADER_JSON, NULL);

  sl__buf h;
  sl__buf_init(&h, 0);
  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "a", "F32", "[2]", 0, 8);
  put_tensor(&h, false, "b", "F32", "[1]", 12, 16);
  sl__buf_putc(&h, '}');
  expect("row 31 hole", hz(h.data, 16), SL_STATUS_ST_INVALID_OFFSET, "b");
  sl__buf_free(&h);
  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "a", "F32", "[2]", 0, 8);
  put_tensor(&h, false, "b", "F32", "[2]", 4, 12);
  sl__buf_putc(&h, '}');
  expect("row 32 overlap", hz(h.data, 12), SL_STATUS_ST_INVALID_OFFSET, "b");
  sl__buf_free(&h);
  expect("row 33 reversed", hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4),
         SL_STATUS_ST_INVALID_OFFSET, "a");
  expect("row 33 not from 0", hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16),
         SL_STATUS_ST_INVALID_OFFSET, "a");
  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "a", "F32", "[1]", 0, 4);
  put_tensor(&h, false, "b", "F32", "[1]", 4, 0);
  sl__buf_putc(&h, '}');
  expect("reversed at the running position", hz(h.data, 4), SL_STATUS_ST_INVALID_OFFSET, "b");
  sl__buf_free(&h);

  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "w", "F32", "[1]", 1, 5);
  put_tensor(&h, false, "v", "I8", "[1]", 0, 1);
  sl__buf_putc(&h, '}');
  OK_HDR("row 34", h.data, 5, {"v", SL_DT_I8, 1, {1}, 0, 1}, {"w", SL_DT_F32, 1, {1}, 1, 5});
  sl__buf_free(&h);

  expect("row 35", hz("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2),
         SL_STATUS_ST_MISALIGNED, "a");
  expect("F6_E3M2 [1]", hz("{\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_MISALIGNED, "a");
  OK_HDR("F4 [4] = 2 bytes", "{\"a\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]}}", 2,
         {"a", SL_DT_F4, 1, {4}, 0, 2});
  expect("F4 [4] with 1 byte", hz("{\"a\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_TENSOR_INFO, "a");

  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "fp8s", "F8_E4M3FNUZ", "[3]", 13, 16);
  put_tensor(&h, false, "c", "C64", "[1]", 5, 13);
  put_tensor(&h, false, "e8", "F8_E8M0", "[2]", 3, 5);
  put_tensor(&h, false, "f6", "F6_E2M3", "[4]", 0, 3);
  sl__buf_putc(&h, '}');
  OK_HDR("row 36", h.data, 16, {"f6", SL_DT_F6_E2M3, 1, {4}, 0, 3}, {"e8", SL_DT_F8_E8M0, 1, {2}, 3, 5},
         {"c", SL_DT_C64, 1, {1}, 5, 13}, {"fp8s", SL_DT_F8_E4M3FNUZ, 1, {3}, 13, 16});
  sl__buf_free(&h);

  /* All 22 dtypes, each [8] elements (= bits bytes), in reverse data order in the JSON. */
  want_tensor all[SL_DT_COUNT];
  uint64_t pos = 0;
  for (int d = 0; d < SL_DT_COUNT; d++) {
    all[d] = (want_tensor){sl__dtype_name((sl__dtype)d), (sl__dtype)d, 1, {8}, pos, pos + sl__dtype_bits(d)};
    pos += sl__dtype_bits((sl__dtype)d);
  }
  sl__buf_putc(&h, '{');
  for (int d = SL_DT_COUNT - 1; d >= 0; d--)
    put_tensor(&h, d == SL_DT_COUNT - 1, all[d].name, all[d].name, "[8]", all[d].begin, all[d].end);
  sl__buf_putc(&h, '}');
  expect_ok("all 22 dtypes", hz(h.data, pos), all, SL_DT_COUNT);
  sl__buf_free(&h);

  static const char *const unknown[] = {"f32", "U128", "FP4", "E8M0", "UE8", "F8_E4M3FN", "", "F32 "};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "unknown dtype '%s'", unknown[i]);
    sl__buf_putc(&h, '{');
    put_tensor(&h, true, "a", unknown[i], "[1]", 0, 4);
    sl__buf_putc(&h, '}');
    expect(what, hz(h.data, 4), SL_STATUS_ST_HEADER_JSON, "a");
    sl__buf_free(&h);
  }
  expect("dtype not a string", hz("{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, "a");
  OK_HDR("escaped field names and dtype",
         "{\"a\":{\"dty\\u0070e\":\"U\\u0038\",\"sh\\u0061pe\":[1],\"data_offsets\":[0,1]}}", 1,
         {"a", SL_DT_U8, 1, {1}, 0, 1});
}

static void rows_integers(void) {
  static const char *const bad_offsets[] = {"[0,8,9]", "[0]", "{\"0\":0,\"1\":4}", "[]", "null"};
  for (size_t i = 0; i < sizeof bad_offsets / sizeof bad_offsets[0]; i++) {
    char hdr[256];
    char what[64];
    snprintf(hdr, sizeof hdr, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":%s}}",
             bad_offsets[i]);
    snprintf(what, sizeof what, "row 37 offsets %s", bad_offsets[i]);
    expect(what, hz(hdr, 8), SL_STATUS_ST_HEADER_JSON, "a");
  }
  static const char *const bad_shapes[] = {"[2.0]", "[-1]",    "[01]", "[1.]", "null",  "[\"2\"]", "[{}]",
                                           "[2e0]", "[ 1 , ]", "[+1]", "2",    "[[2]]", "[true]"};
  for (size_t i = 0; i < sizeof bad_shapes / sizeof bad_shapes[0]; i++) {
    char hdr[256];
    char what[64];
    snprintf(hdr, sizeof hdr, "{\"a\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[0,8]}}",
             bad_shapes[i]);
    snprintf(what, sizeof what, "row 38 shape %s", bad_shapes[i]);
    expect(what, hz(hdr, 8), SL_STATUS_ST_HEADER_JSON, NULL);
  }
  static const char *const bad_ints[] = {"[0,8e0]", "[0,4.0]", "[0,18446744073709551616]", "[0,-0]",
                                         "[0,99999999999999999999]"};
  for (size_t i = 0; i < sizeof bad_ints / sizeof bad_ints[0]; i++) {
    char hdr[256];
    char what[64];
    snprintf(hdr, sizeof hdr, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":%s}}", bad_ints[i]);
    snprintf(what, sizeof what, "row 38 offsets %s", bad_ints[i]);
    expect(what, hz(hdr, 4), SL_STATUS_ST_HEADER_JSON, NULL);
  }
  /* 2^64−1 is a valid integer: the offsets then disagree with the shape. */
  expect("offsets [0,2^64-1]",
         hz("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,18446744073709551615]}}", 4),
         SL_STATUS_ST_TENSOR_INFO, "a");
  /* Exact u64 parsing, where a double would round. */
  OK_HDR(
      "exact integers",
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[0,9007199254740993,18446744073709551614],\"data_offsets\":[0,0]}}",
      0, {"a", SL_DT_U8, 3, {0, 9007199254740993ULL, 18446744073709551614ULL}, 0, 0});
  OK_HDR("row 39",
         "{\"a\":{\"extra\":[1.5,{\"k\":null}],\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
         "\"more\":{\"x\":[true,false,-0.5e-3,\"s\\n\",{}]}}}",
         8, {"a", SL_DT_F32, 1, {2}, 0, 8});
  expect("row 40 no data_offsets", hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8),
         SL_STATUS_ST_HEADER_JSON, "a");
  expect("row 40 no shape", hz("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8),
         SL_STATUS_ST_HEADER_JSON, "a");
  expect("row 40 no dtype", hz("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8), SL_STATUS_ST_HEADER_JSON,
         "a");
  expect("row 40 dtype f32", hz("{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
         SL_STATUS_ST_HEADER_JSON, "a");
  expect("row 40 empty tensor object", hz("{\"a\":{}}", 0), SL_STATUS_ST_HEADER_JSON, "a");
  expect("row 41 {\"a\":5}", hz("{\"a\":5}", 0), SL_STATUS_ST_HEADER_JSON, "a");
  expect("row 41 []", hz("[]", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 41 \"x\"", hz("\"x\"", 0), SL_STATUS_ST_HEADER_JSON, NULL);
  expect("tensor is an array", hz("{\"a\":[]}", 0), SL_STATUS_ST_HEADER_JSON, "a");
  OK_HDR("row 42", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,0,18446744073709551615],\"data_offsets\":[0,0]}}",
         0, {"a", SL_DT_F32, 3, {1, 0, U64MAX}, 0, 0});
  expect("row 43",
         hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551615,2,0],\"data_offsets\":[0,0]}}", 0),
         SL_STATUS_ST_OVERFLOW, "a");
  expect("row 44",
         hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0),
         SL_STATUS_ST_OVERFLOW, "a");
  /* 8 dimensions are accepted, 9 are not. */
  OK_HDR("8 dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,2,1,2,1,2,1,2],\"data_offsets\":[0,16]}}", 16,
         {"a", SL_DT_U8, 8, {1, 2, 1, 2, 1, 2, 1, 2}, 0, 16});
  expect("9 dims", hz("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,2,1,2,1,2,1,2,1],\"data_offsets\":[0,16]}}", 16),
         SL_STATUS_ST_HEADER_JSON, "a");
}

static void rows_zero_size(void) {
  sl__buf h;
  sl__buf_init(&h, 0);
  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "z", "F32", "[0]", 8, 8);
  put_tensor(&h, false, "a", "F32", "[1]", 0, 4);
  sl__buf_putc(&h, '}');
  expect("row 45", hz(h.data, 4), SL_STATUS_ST_INVALID_OFFSET, "z");
  sl__buf_free(&h);

  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "c", "F32", "[0]", 4, 4);
  put_tensor(&h, false, "b", "F32", "[0]", 4, 4);
  put_tensor(&h, false, "a", "F32", "[1]", 0, 4);
  put_tensor(&h, false, "e", "BF16", "[0,3]", 0, 0);
  sl__buf_putc(&h, '}');
  OK_HDR("row 46", h.data, 4, {"e", SL_DT_BF16, 2, {0, 3}, 0, 0}, {"a", SL_DT_F32, 1, {1}, 0, 4},
         {"b", SL_DT_F32, 1, {0}, 4, 4}, {"c", SL_DT_F32, 1, {0}, 4, 4});
  sl__buf_free(&h);

  sl__buf_putc(&h, '{');
  put_tensor(&h, true, "a", "F32", "[2]", 0, 8);
  put_tensor(&h, false, "z", "F32", "[0]", 4, 4);
  sl__buf_putc(&h, '}');
  expect("zero-size inside a tensor", hz(h.data, 8), SL_STATUS_ST_INVALID_OFFSET, "z");
  sl__buf_free(&h);
}

static void rows_names(void) {
  expect("row 47", hz("{\"\\u0000x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  OK_HDR("row 48 empty name", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         {"", SL_DT_U8, 1, {1}, 0, 1});
  OK_HDR("row 48 é", "{\"\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         {"\xc3\xa9", SL_DT_U8, 1, {1}, 0, 1});
  OK_HDR("row 48 surrogate pair",
         "{\"\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
         {"\xf0\x9f\x98\x80", SL_DT_U8, 1, {1}, 0, 1});
  OK_HDR("escapes decoded",
         "{\"q\\\"b\\\\s\\/"
         "\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20AC\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
         1, {"q\"b\\s/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac", SL_DT_U8, 1, {1}, 0, 1});
  expect("row 49 lone high surrogate",
         hz("{\"\\ud800\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("row 49 raw 0x01", hz("{\"a\x01\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("lone low surrogate", hz("{\"\\udc00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("high surrogate + BMP",
         hz("{\"\\ud800\\u0041\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("invalid escape \\x", hz("{\"\\x41\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("short \\u escape", hz("{\"\\u12\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("raw tab in a name", hz("{\"a\tb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
         SL_STATUS_ST_HEADER_JSON, NULL);
  expect("name = __metadata__ is the map", hz("{\"__metadata__\":{\"dtype\":\"U8\",\"shape\":[1]}}", 0),
         SL_STATUS_ST_HEADER_JSON, NULL);
}

/* A tensor whose ignored field "x" nests `depth` levels in total (top object = 1, tensor = 2). */
static sl__buf nested(int depth) {
  sl__buf h;
  sl__buf_init(&h, 0);
  sl__buf_appendf(&h, "%s", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":");
  for (int i = 2; i < depth; i++)
    sl__buf_appendf(&h, "%s", i % 2 ? "{\"k\":" : "[");
  sl__buf_putc(&h, '0');
  for (int i = depth - 1; i >= 2; i--)
    sl__buf_putc(&h, i % 2 ? '}' : ']');
  sl__buf_append(&h, "}}", 2);
  return h;
}

static void rows_nesting(void) {
  sl__buf h = nested(128);
  OK_HDR("depth 128", h.data, 1, {"a", SL_DT_U8, 1, {1}, 0, 1});
  sl__buf_free(&h);
  h = nested(129);
  expect("row 50 depth 129", hz(h.data, 1), SL_STATUS_ST_HEADER_JSON, NULL);
  sl__buf_free(&h);
  h = nested(5000);
  expect("depth 5000", hz(h.data, 1), SL_STATUS_ST_HEADER_JSON, NULL);
  sl__buf_free(&h);
  static const char *const bad_values[] = {"01",      "tru",   "nul", "1.e5", "-", "\"\x01\"", "[1 2]",
                                           "{\"k\"}", "{1:2}", ".5",  "1e",   "[", "NaN",      "'s'"};
  for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
    char hdr[256];
    char what[64];
    snprintf(hdr, sizeof hdr, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":%s}}",
             bad_values[i]);
    snprintf(what, sizeof what, "ignored value %zu", i);
    expect(what, hz(hdr, 1), SL_STATUS_ST_HEADER_JSON, NULL);
  }
}

static void rows_api(void) {
  /* A prefix holding only the length and the header suffices (the data is never looked at). */
  sl__buf b = hz(T60, 0);
  sl__st_header h;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__st_parse((const uint8_t *)b.data, b.len, b.len + 16, "prefix only", &h, &err);
  CHECKF(st == SL_STATUS_OK, "prefix only: %s", err.msg);
  CHECK_EQ_U64(h.header_len, 60);
  CHECK_EQ_U64(h.data_start, 68);
  CHECK_EQ_U64(h.file_size, 84);
  sl__st_header_free(&h);
  sl__st_header_free(&h); /* freeing twice is harmless, NULL too */
  sl__st_header_free(NULL);
  sl__err_clear(&err);
  st = sl__st_parse((const uint8_t *)b.data, b.len - 1, b.len + 16, "short prefix", &h, &err);
  CHECKF(st == SL_STATUS_INVALID_ARGUMENT, "short prefix: %s", sl_status_name(st));
  sl__buf_free(&b);
}

/* ---- files ---- */

static char *tmp_path(const char *name) {
  return sl__path_join(tmpdir, name);
}

static void expect_file(const char *name, const sl__buf *b, sl_status want) {
  char *path = tmp_path(name);
  CHECK(sl_test_write_file(path, b->data != NULL ? b->data : "", b->len) == 0);
  sl__st_header h;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__st_read_file(path, &h, &err);
  CHECKF(st == want, "file %s: status %s, expected %s (%s)", name, sl_status_name(st), sl_status_name(want),
         err.msg);
  if (st != SL_STATUS_OK)
    CHECK_CONTAINS(err.msg, path);
  sl__st_header_free(&h);
  unlink(path);
  free(path);
}

static void test_files(void) {
  sl__buf b = raw("", 0);
  expect_file("row1", &b, SL_STATUS_ST_HEADER_TOO_SMALL);
  sl__buf_free(&b);
  b = raw("\x08\0\0\0\0\0\0", 7);
  expect_file("row2", &b, SL_STATUS_ST_HEADER_TOO_SMALL);
  sl__buf_free(&b);
  b = raw("\x3c\0\0\0\0\xff\xff\xff{}xx", 12);
  expect_file("row3", &b, SL_STATUS_ST_HEADER_TOO_LARGE);
  sl__buf_free(&b);
  b = raw("\x3c\0\0\0\0\0\0\0", 8);
  expect_file("row7", &b, SL_STATUS_ST_HEADER_LENGTH);
  sl__buf_free(&b);
  b = hz(T60, 16);
  expect_file("row11", &b, SL_STATUS_OK);
  sl__buf_free(&b);
  b = hz(T60, 14);
  expect_file("row13", &b, SL_STATUS_ST_INCOMPLETE);
  sl__buf_free(&b);
  b = HZL("{}\xff", 0);
  expect_file("row25", &b, SL_STATUS_ST_HEADER_UTF8);
  sl__buf_free(&b);
  b = hz("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
  expect_file("row40", &b, SL_STATUS_ST_HEADER_JSON);
  sl__buf_free(&b);

  sl__st_header h;
  sl__err err;
  sl__err_clear(&err);
  char *missing = tmp_path("does-not-exist.safetensors");
  CHECK(sl__st_read_file(missing, &h, &err) == SL_STATUS_IO);
  CHECK_CONTAINS(err.msg, missing);
  free(missing);
  sl__err_clear(&err);
  CHECK(sl__st_read_file(tmpdir, &h, &err) == SL_STATUS_IO);
  CHECK_CONTAINS(err.msg, tmpdir);

  /* Header-only sparse file: an 8 GiB tensor whose data was never written. */
  sl__buf hdr;
  sl__buf_init(&hdr, 0);
  sl__buf_appendf(
      &hdr, "{\"__metadata__\":{\"format\":\"pt\"},\"big\":{\"dtype\":\"BF16\",\"shape\":[4096,1048576],"
            "\"data_offsets\":[0,8589934592]}}");
  b = hz(hdr.data, 0);
  char *path = tmp_path("sparse.safetensors");
  CHECK(sl_test_write_file(path, b.data, b.len) == 0);
  CHECK(truncate(path, (off_t)(b.len + 8589934592ULL)) == 0);
  sl__err_clear(&err);
  double t0 = sl__now();
  CHECKF(sl__st_read_file(path, &h, &err) == SL_STATUS_OK, "sparse: %s", err.msg);
  CHECKF(sl__now() - t0 < 1.0, "reading a header-only file took %.2f s: is the data section read?",
         sl__now() - t0);
  CHECK_EQ_U64(h.n_tensors, 1);
  CHECK_EQ_U64(h.file_size, b.len + 8589934592ULL);
  CHECK_EQ_U64(h.data_start, b.len);
  if (h.n_tensors == 1)
    CHECK_EQ_U64(h.tensors[0].end, 8589934592ULL);
  sl__st_header_free(&h);
  CHECK(truncate(path, (off_t)(b.len + 8589934591ULL)) == 0);
  sl__err_clear(&err);
  CHECK(sl__st_read_file(path, &h, &err) == SL_STATUS_ST_INCOMPLETE);
  CHECK_CONTAINS(err.msg, path);
  unlink(path);
  free(path);
  sl__buf_free(&b);
  sl__buf_free(&hdr);
}

/* ---- writer goldens ---- */

/* Checks that dir holds no entry (no target, no temporary file left behind). */
static void dir_is_empty(const char *dir, const char *label) {
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  if (d == NULL)
    return;
  const struct dirent *e = NULL;
  for (e = readdir(d); e != NULL; e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      CHECKF(false, "%s: '%s' left in the directory", label, e->d_name);
    }
  }
  closedir(d);
}

/* Checks one docs/spec/SAFETENSORS.md §6 golden: build_header, write_file, and parse back. */
static void golden(const char *label, const sl__st_write_tensor *t, size_t n, const sl__st_meta *m, size_t nm,
                   const char *json, size_t json_len, uint64_t want_n, const size_t *want_order) {
  CHECKF(strlen(json) == json_len, "%s: the expected JSON has %zu bytes, the spec says %zu", label,
         strlen(json), json_len);
  sl__buf want;
  sl__buf_init(&want, 0);
  put_le64(&want, want_n);
  sl__buf_append(&want, json, strlen(json));
  while (want.len < 8 + want_n)
    sl__buf_putc(&want, ' ');
  size_t header_bytes = want.len;
  for (size_t k = 0; k < n; k++)
    sl__buf_append(&want, t[want_order[k]].data, t[want_order[k]].nbytes);

  uint8_t *hdr = NULL;
  size_t hdr_len = 0;
  size_t *order = NULL;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__st_build_header(t, n, m, nm, &hdr, &hdr_len, &order, &err);
  CHECKF(st == SL_STATUS_OK, "%s: build_header: %s", label, err.msg);
  CHECKF(hdr_len == header_bytes && hdr != NULL && memcmp(hdr, want.data, hdr_len) == 0,
         "%s: header differs: got %zu bytes '%.*s'", label, hdr_len, (int)(hdr_len > 8 ? hdr_len - 8 : 0),
         hdr != NULL ? (const char *)hdr + 8 : "");
  for (size_t k = 0; k < n && order != NULL; k++)
    CHECKF(order[k] == want_order[k], "%s: order[%zu] = %zu, expected %zu", label, k, order[k],
           want_order[k]);
  free(hdr);
  free(order);

  char *path = tmp_path("golden.safetensors");
  sl__err_clear(&err);
  st = sl__st_write_file(path, t, n, m, nm, &err);
  CHECKF(st == SL_STATUS_OK, "%s: write_file: %s", label, err.msg);
  char *got = NULL;
  size_t got_len = 0;
  sl__err_clear(&err);
  CHECK(sl__read_file(path, 1 << 20, &got, &got_len, &err) == SL_STATUS_OK);
  CHECKF(got != NULL && got_len == want.len && memcmp(got, want.data, want.len) == 0,
         "%s: file differs (%zu bytes, expected %zu)", label, got_len, want.len);

  sl__st_header h;
  sl__err_clear(&err);
  st = sl__st_read_file(path, &h, &err);
  CHECKF(st == SL_STATUS_OK, "%s: parse back: %s", label, err.msg);
  CHECK_EQ_U64(h.n_tensors, n);
  CHECK_EQ_U64(h.header_len, want_n);
  uint64_t pos = 0;
  for (size_t k = 0; k < n && k < h.n_tensors; k++) {
    const sl__st_write_tensor *w = &t[want_order[k]];
    const sl__st_tensor *r = &h.tensors[k];
    CHECK_STR(r->name, w->name);
    CHECK(r->dtype == w->dtype);
    CHECK_EQ_U64(r->ndim, w->ndim);
    CHECK(memcmp(r->shape, w->shape, w->ndim * sizeof(uint64_t)) == 0);
    CHECK_EQ_U64(r->begin, pos);
    CHECK_EQ_U64(r->end, pos + w->nbytes);
    pos += w->nbytes;
  }
  CHECK_EQ_U64(h.n_meta, nm);
  for (size_t k = 0; k < h.n_meta; k++) {
    size_t i = 0;
    while (i < nm && strcmp(m[i].key, h.meta[k].key) != 0)
      i++;
    CHECKF(i < nm && strcmp(m[i].value, h.meta[k].value) == 0, "%s: metadata '%s' differs", label,
           h.meta[k].key);
    if (k > 0)
      CHECKF(strcmp(h.meta[k - 1].key, h.meta[k].key) < 0, "%s: metadata keys not sorted", label);
  }
  sl__st_header_free(&h);
  unlink(path);
  free(path);
  free(got);
  sl__buf_free(&want);
}

static void test_goldens(void) {
  golden("golden: no tensors", NULL, 0, NULL, 0, "{}", 2, 8, NULL);
  const sl__st_meta pt[] = {{"framework", "pt"}};
  golden("golden: metadata", NULL, 0, pt, 1, "{\"__metadata__\":{\"framework\":\"pt\"}}", 35, 40, NULL);

  uint8_t zeros[16] = {0};
  sl__st_write_tensor test = {"test", SL_DT_I32, 2, {2, 2}, zeros, 16};
  const size_t o1[] = {0};
  golden("golden: test I32", &test, 1, NULL, 0, T60, 60, 64, o1);

  uint8_t f32[24];
  for (int i = 0; i < 6; i++) {
    float v = (float)i;
    memcpy(f32 + 4 * i, &v, 4); /* little-endian host assumed, as by the loader */
  }
  CHECK(f32[4 * 5 + 3] == 0x40 && f32[4 * 5 + 2] == 0xa0); /* 5.0f = 0x40a00000 */
  sl__st_write_tensor attn = {"attn.0", SL_DT_F32, 3, {1, 2, 3}, f32, 24};
  golden("golden: attn.0", &attn, 1, NULL, 0,
         "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}", 64, 64, o1);
  sl__st_write_tensor attn0 = {"attn0", SL_DT_F32, 4, {1, 1, 2, 3}, f32, 24};
  golden("golden: attn0", &attn0, 1, NULL, 0,
         "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}", 65, 72, o1);

  const uint8_t da[3] = {1, 2, 3};
  const uint8_t db[4] = {4, 5, 6, 7};
  const uint8_t dc[8] = {8, 9, 10, 11, 12, 13, 14, 15};
  const uint8_t dd[4] = {16, 17, 18, 19};
  const sl__st_write_tensor four[] = {{"a", SL_DT_U8, 1, {3}, da, 3},
                                      {"b", SL_DT_F32, 1, {1}, db, 4},
                                      {"c", SL_DT_I64, 1, {1}, dc, 8},
                                      {"d", SL_DT_BF16, 1, {2}, dd, 4}};
  const size_t o4[] = {2, 1, 3, 0};
  golden("golden: four dtypes", four, 4, NULL, 0,
         "{\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
         "\"d\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}",
         218, 224, o4);

  const uint8_t dx[2] = {0x21, 0x43};
  const uint8_t dy[1] = {1};
  const uint8_t dz[3] = {0xaa, 0xbb, 0xcc};
  const sl__st_write_tensor sub[] = {
      {"x", SL_DT_F4, 1, {4}, dx, 2}, {"y", SL_DT_BOOL, 1, {1}, dy, 1}, {"z", SL_DT_F6_E2M3, 1, {4}, dz, 3}};
  const size_t o3[] = {2, 0, 1};
  golden("golden: sub-byte", sub, 3, NULL, 0,
         "{\"z\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]},"
         "\"x\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[3,5]},"
         "\"y\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[5,6]}}",
         164, 168, o3);

  /* Escaping, metadata key order, ties by name bytes, a scalar and an empty tensor. */
  const sl__st_meta meta[] = {{"b", "tab\there"}, {"a", "\x01\x1f\x7f"}, {"\xc3\xa9", "q\"\\/"}};
  const uint8_t d4[4] = {1, 2, 3, 4};
  const sl__st_write_tensor esc[] = {{"n\"a\\m\b\f\n\r\t\x01\x1f/\xc3\xa9", SL_DT_F32, 0, {0}, d4, 4},
                                     {"B", SL_DT_F32, 2, {0, 5}, NULL, 0},
                                     {"A", SL_DT_F32, 1, {1}, d4, 4}};
  const size_t oe[] = {2, 1, 0};
  const char *esc_json =
      "{\"__metadata__\":{\"a\":\"\\u0001\\u001f\x7f\",\"b\":\"tab\\there\",\"\xc3\xa9\":\"q\\\"\\\\/\"},"
      "\"A\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"B\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
      "\"n\\\"a\\\\m\\b\\f\\n\\r\\t\\u0001\\u001f/\xc3\xa9\":{\"dtype\":\"F32\",\"shape\":[],"
      "\"data_offsets\":[4,8]}}";
  size_t esc_len = strlen(esc_json);
  uint64_t esc_n = (esc_len + 7) / 8 * 8;
  golden("golden: escapes", esc, 3, meta, 3, esc_json, esc_len, esc_n, oe);
}

/* ---- writer refusals ---- */

static void refuse(const char *label, const sl__st_write_tensor *t, size_t n, const sl__st_meta *m, size_t nm,
                   sl_status want) {
  char *path = tmp_path("refused.safetensors");
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__st_write_file(path, t, n, m, nm, &err);
  CHECKF(st == want, "%s: status %s, expected %s (%s)", label, sl_status_name(st), sl_status_name(want),
         err.msg);
  CHECKF(err.msg[0] != '\0', "%s: no message", label);
  CHECKF(access(path, F_OK) != 0, "%s: the target exists after a refused write", label);
  dir_is_empty(tmpdir, label);
  unlink(path);
  free(path);
}

static void test_refusals(void) {
  const uint8_t two[2] = {0, 0};
  const sl__st_write_tensor f4_13 = {"x", SL_DT_F4, 2, {1, 3}, two, 2};
  refuse("F4 [1,3] with 2 bytes", &f4_13, 1, NULL, 0, SL_STATUS_ST_MISALIGNED);
  const sl__st_write_tensor f4_12 = {"x", SL_DT_F4, 2, {1, 2}, two, 2};
  refuse("F4 [1,2] with 2 bytes", &f4_12, 1, NULL, 0, SL_STATUS_ST_TENSOR_INFO);
  const sl__st_write_tensor huge = {"x", SL_DT_F32, 2, {U64MAX, 2}, two, 2};
  refuse("overflowing shape", &huge, 1, NULL, 0, SL_STATUS_ST_OVERFLOW);
  const sl__st_write_tensor dup[] = {{"x", SL_DT_U8, 1, {2}, two, 2}, {"x", SL_DT_F16, 1, {1}, two, 2}};
  refuse("duplicate names", dup, 2, NULL, 0, SL_STATUS_INVALID_ARGUMENT);
  const sl__st_write_tensor meta_name = {"__metadata__", SL_DT_U8, 1, {2}, two, 2};
  refuse("tensor named __metadata__", &meta_name, 1, NULL, 0, SL_STATUS_INVALID_ARGUMENT);
  const sl__st_write_tensor bad_utf8 = {"\xff", SL_DT_U8, 1, {2}, two, 2};
  refuse("name not UTF-8", &bad_utf8, 1, NULL, 0, SL_STATUS_INVALID_ARGUMENT);
  const sl__st_write_tensor no_data = {"x", SL_DT_U8, 1, {2}, NULL, 2};
  refuse("no data", &no_data, 1, NULL, 0, SL_STATUS_INVALID_ARGUMENT);
  const sl__st_write_tensor nine = {"x", SL_DT_U8, 9, {1, 1, 1, 1, 1, 1, 1, 1}, two, 1};
  refuse("9 dims", &nine, 1, NULL, 0, SL_STATUS_INVALID_ARGUMENT);
  const sl__st_meta dup_meta[] = {{"k", "1"}, {"k", "2"}};
  refuse("duplicate metadata key", NULL, 0, dup_meta, 2, SL_STATUS_INVALID_ARGUMENT);

  /* Header size limit: padded N = 100,000,000 is accepted, one byte more is refused. */
  size_t vlen = SL_ST_MAX_HEADER - 25; /* {"__metadata__":{"k":"…"}} is 25 bytes + the value */
  char *value = malloc(vlen + 2);
  CHECK(value != NULL);
  if (value == NULL)
    return;
  memset(value, 'v', vlen + 1);
  value[vlen] = '\0';
  sl__st_meta big = {"k", value};
  uint8_t *hdr = NULL;
  size_t hdr_len = 0;
  size_t *order = NULL;
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__st_build_header(NULL, 0, &big, 1, &hdr, &hdr_len, &order, &err) == SL_STATUS_OK, "N = 1e8: %s",
         err.msg);
  CHECK_EQ_U64(hdr_len, 8 + SL_ST_MAX_HEADER);
  free(hdr);
  free(order);
  value[vlen] = 'v';
  value[vlen + 1] = '\0';
  refuse("header too large", NULL, 0, &big, 1, SL_STATUS_ST_HEADER_TOO_LARGE);
  free(value);

  /* Unwritable target directory: an I/O error, nothing left behind. */
  char *path = sl__asprintf("%s/no-such-dir/x.safetensors", tmpdir);
  sl__err_clear(&err);
  CHECK(sl__st_write_file(path, NULL, 0, NULL, 0, &err) == SL_STATUS_IO);
  CHECK_CONTAINS(err.msg, "no-such-dir");
  free(path);

  /* Replacing a file by rename: a reader holding the old file keeps its bytes. */
  path = tmp_path("replace.safetensors");
  const uint8_t one[4] = {1, 1, 1, 1};
  const uint8_t other[4] = {2, 2, 2, 2};
  const sl__st_write_tensor t1 = {"t", SL_DT_U8, 1, {4}, one, 4};
  const sl__st_write_tensor t2 = {"t", SL_DT_U8, 1, {4}, other, 4};
  sl__err_clear(&err);
  CHECK(sl__st_write_file(path, &t1, 1, NULL, 0, &err) == SL_STATUS_OK);
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0);
  CHECK(sl__st_write_file(path, &t2, 1, NULL, 0, &err) == SL_STATUS_OK);
  uint8_t old_tail[4] = {0};
  uint8_t new_tail[4] = {0};
  struct stat sb;
  CHECK(fstat(fd, &sb) == 0 && sb.st_size == 68); /* 8 + N = 56 (53-byte JSON) + 4 */
  CHECK(pread(fd, old_tail, 4, 64) == 4);
  close(fd);
  char *content = NULL;
  size_t len = 0;
  CHECK(sl__read_file(path, 4096, &content, &len, &err) == SL_STATUS_OK);
  if (content != NULL && len == 68)
    memcpy(new_tail, content + 64, 4);
  CHECK_EQ_U64(len, 68);
  CHECK(memcmp(old_tail, one, 4) == 0);
  CHECK(memcmp(new_tail, other, 4) == 0);
  free(content);
  unlink(path);
  free(path);
  dir_is_empty(tmpdir, "after replace");
}

/* ---- random round trip ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static const char *const pieces[] = {
    "a",    "layer.",       "\xc3\xa9", "\xf0\x9f\x98\x80", "\"", "\\", "\n", "\t", "\x01", "\x1f", "/",
    "\x7f", "\xe4\xb8\xad", " ",        "weight",           "\b", "\f", "\r", "_",  "0"};
#define N_PIECES (sizeof pieces / sizeof pieces[0])

static void random_text(sl__buf *b, int max_pieces) {
  int k = (int)(rnd() % (uint64_t)(max_pieces + 1));
  for (int i = 0; i < k; i++)
    sl__buf_appendf(b, "%s", pieces[rnd() % N_PIECES]);
}

static void roundtrip_once(int iter) {
  sl__st_write_tensor t[8];
  sl__buf names[8];
  uint8_t *data[8];
  sl__st_meta meta[3];
  sl__buf keys[3];
  sl__buf values[3];
  size_t n = (size_t)(rnd() % 9);
  size_t nm = (size_t)(rnd() % 4);
  for (size_t i = 0; i < n; i++) {
    memset(&t[i], 0, sizeof t[i]);
    uint64_t nbytes = 0;
    do {
      t[i].dtype = (sl__dtype)(rnd() % SL_DT_COUNT);
      t[i].ndim = (uint32_t)(rnd() % 5);
      for (uint32_t d = 0; d < t[i].ndim; d++)
        t[i].shape[d] = rnd() % 6;
    } while (sl__st_nbytes(t[i].dtype, t[i].ndim, t[i].shape, &nbytes) != SL_STATUS_OK);
    sl__buf_init(&names[i], 0);
    random_text(&names[i], 4);
    sl__buf_appendf(&names[i], "#%zu", i); /* unique */
    t[i].name = sl__buf_str(&names[i]);
    data[i] = malloc(nbytes + 1);
    for (uint64_t k = 0; k < nbytes; k++)
      data[i][k] = (uint8_t)rnd();
    t[i].data = data[i];
    t[i].nbytes = nbytes;
  }
  for (size_t i = 0; i < nm; i++) {
    sl__buf_init(&keys[i], 0);
    sl__buf_init(&values[i], 0);
    random_text(&keys[i], 3);
    sl__buf_appendf(&keys[i], "%zu", i);
    random_text(&values[i], 5);
    meta[i].key = sl__buf_str(&keys[i]);
    meta[i].value = sl__buf_str(&values[i]);
  }

  char *p1 = tmp_path("rt1.safetensors");
  char *p2 = tmp_path("rt2.safetensors");
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__st_write_file(p1, t, n, meta, nm, &err);
  CHECKF(st == SL_STATUS_OK, "round trip %d: write: %s", iter, err.msg);
  char *bytes1 = NULL;
  size_t len1 = 0;
  CHECK(sl__read_file(p1, 1 << 20, &bytes1, &len1, &err) == SL_STATUS_OK);
  sl__st_header h;
  sl__err_clear(&err);
  st = sl__st_read_file(p1, &h, &err);
  CHECKF(st == SL_STATUS_OK, "round trip %d: read: %s", iter, err.msg);
  CHECKF(h.n_tensors == n && h.n_meta == nm, "round trip %d: %zu tensors, %zu metadata; expected %zu, %zu",
         iter, h.n_tensors, h.n_meta, n, nm);

  /* The same table, and the data where the header says. */
  for (size_t k = 0; k < h.n_tensors && bytes1 != NULL; k++) {
    const sl__st_tensor *r = &h.tensors[k];
    size_t i = 0;
    while (i < n && strcmp(t[i].name, r->name) != 0)
      i++;
    CHECKF(i < n, "round trip %d: unknown tensor '%s'", iter, r->name);
    if (i == n)
      continue;
    CHECKF(r->dtype == t[i].dtype && r->ndim == t[i].ndim &&
               memcmp(r->shape, t[i].shape, t[i].ndim * sizeof(uint64_t)) == 0 &&
               r->end - r->begin == t[i].nbytes,
           "round trip %d: tensor '%s' differs", iter, r->name);
    CHECKF(h.data_start + r->end <= len1 &&
               memcmp(bytes1 + h.data_start + r->begin, t[i].data, t[i].nbytes) == 0,
           "round trip %d: data of '%s' differs", iter, r->name);
  }
  for (size_t k = 0; k < h.n_meta; k++) {
    size_t i = 0;
    while (i < nm && strcmp(meta[i].key, h.meta[k].key) != 0)
      i++;
    CHECKF(i < nm && strcmp(meta[i].value, h.meta[k].value) == 0, "round trip %d: metadata '%s' differs",
           iter, h.meta[k].key);
    if (k > 0)
      CHECKF(strcmp(h.meta[k - 1].key, h.meta[k].key) < 0, "round trip %d: metadata not sorted", iter);
  }

  /* Rewriting what was read (in data order, with the file's bytes) gives the same file. */
  sl__st_write_tensor again[8];
  for (size_t k = 0; k < h.n_tensors && k < 8 && bytes1 != NULL; k++) {
    const sl__st_tensor *r = &h.tensors[k];
    memset(&again[k], 0, sizeof again[k]);
    again[k].name = r->name;
    again[k].dtype = r->dtype;
    again[k].ndim = r->ndim;
    memcpy(again[k].shape, r->shape, sizeof r->shape);
    again[k].data = bytes1 + h.data_start + r->begin;
    again[k].nbytes = r->end - r->begin;
  }
  sl__err_clear(&err);
  st = sl__st_write_file(p2, again, h.n_tensors, h.meta, h.n_meta, &err);
  CHECKF(st == SL_STATUS_OK, "round trip %d: rewrite: %s", iter, err.msg);
  char *bytes2 = NULL;
  size_t len2 = 0;
  CHECK(sl__read_file(p2, 1 << 20, &bytes2, &len2, &err) == SL_STATUS_OK);
  CHECKF(bytes1 != NULL && bytes2 != NULL && len1 == len2 && memcmp(bytes1, bytes2, len1) == 0,
         "round trip %d: rewritten file differs (%zu vs %zu bytes)", iter, len1, len2);

  sl__st_header_free(&h);
  free(bytes1);
  free(bytes2);
  unlink(p1);
  unlink(p2);
  free(p1);
  free(p2);
  for (size_t i = 0; i < n; i++) {
    sl__buf_free(&names[i]);
    free(data[i]);
  }
  for (size_t i = 0; i < nm; i++) {
    sl__buf_free(&keys[i]);
    sl__buf_free(&values[i]);
  }
}

static void test_roundtrip(void) {
  for (int iter = 0; iter < 300; iter++)
    roundtrip_once(iter);
}

int main(void) {
  tmpdir = sl_test_mkdtemp("st");
  if (tmpdir == NULL) {
    fprintf(stderr, "cannot create a temporary directory\n");
    return 1;
  }
  rows_length();
  rows_basic();
  rows_syntax();
  rows_metadata();
  rows_schema();
  rows_integers();
  rows_zero_size();
  rows_names();
  rows_nesting();
  rows_api();
  CHECKF(n_defects >= 30, "only %d defective inputs", n_defects);
  fprintf(stderr, "%d defective inputs checked\n", n_defects);
  test_files();
  test_goldens();
  test_refusals();
  test_roundtrip();
  sl_test_rmtree(tmpdir);
  free(tmpdir);
  return sl_test_finish();
}
