/*
 * test_hashmap.c — the library's hash table (src/base/hashmap.c) against independent expectations:
 * many keys checked against values computed from the key alone, forced collisions (a constant
 * hash), growth across many doublings, replace vs. insert-if-absent, missing keys (prefixes,
 * extensions, one byte changed), binary keys with NUL bytes and the empty key, pointer values,
 * insertion order of entries, and both key ownerships (a copied key survives its buffer).
 */
#include "check.h"

#include "base/hashmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MANY 100000u

/* Key i as text, and its value: both computed from i alone. */
static size_t key_text(uint32_t i, char *buf, size_t cap) {
  return (size_t)snprintf(buf, cap, "model.layers.%u.mlp.experts.%u.weight", i / 97, i);
}
static uint64_t value_of(uint32_t i) {
  return (uint64_t)i * 0x9e3779b97f4a7c15ull + 7;
}

static uint64_t constant_hash(const void *key, size_t len) {
  (void)key;
  (void)len;
  return 42;
}

/* Many distinct keys, copied: every one found with its value, every lookup of an absent key
 * fails, and the entries are in insertion order. */
static void many_keys(sl__hashmap_keys keys, uint64_t (*hash)(const void *, size_t), uint32_t n) {
  sl__hashmap m;
  sl__hashmap_init(&m, keys);
  if (hash != NULL)
    m.hash = hash;
  char **owned = keys == SL_HASHMAP_BORROW ? calloc(n, sizeof *owned) : NULL;
  for (uint32_t i = 0; i < n; i++) {
    char buf[96];
    size_t len = key_text(i, buf, sizeof buf);
    const char *key = buf;
    if (owned != NULL) {
      owned[i] = malloc(len + 1);
      memcpy(owned[i], buf, len + 1);
      key = owned[i];
    }
    bool oom = true;
    CHECK(sl__hashmap_put(&m, key, len, value_of(i), NULL, &oom));
    CHECK(!oom);
  }
  CHECK_EQ_U64(m.count, n);
  CHECK(m.index_cap >= 2 * (size_t)n && (m.index_cap & (m.index_cap - 1)) == 0);
  for (uint32_t i = 0; i < n; i++) {
    char buf[96];
    size_t len = key_text(i, buf, sizeof buf);
    uint64_t v = 0;
    CHECKF(sl__hashmap_get(&m, buf, len, &v) && v == value_of(i), "key %u", i);
    CHECK_EQ_U64(m.entries[i].value.u64, value_of(i));
    CHECK(m.entries[i].key_len == len && memcmp(m.entries[i].key, buf, len) == 0);
    /* Absent: a prefix, an extension, one byte changed. */
    CHECK(!sl__hashmap_get(&m, buf, len - 1, &v));
    buf[len] = 'x';
    CHECK(!sl__hashmap_get(&m, buf, len + 1, &v));
    buf[len] = '\0';
    buf[0] = 'M';
    CHECK(sl__hashmap_find(&m, buf, len) == NULL);
  }
  sl__hashmap_free(&m);
  CHECK_EQ_U64(m.count, 0);
  for (uint32_t i = 0; owned != NULL && i < n; i++)
    free(owned[i]);
  free(owned);
}

/* put keeps the first value and reports it; set replaces; slot says whether it added. */
static void replace_and_keep(void) {
  sl__hashmap m;
  sl__hashmap_init(&m, SL_HASHMAP_COPY);
  uint64_t existing = 0;
  bool oom = true;
  CHECK(sl__hashmap_put(&m, "a", 1, 1, &existing, &oom) && !oom);
  CHECK(!sl__hashmap_put(&m, "a", 1, 2, &existing, &oom) && !oom);
  CHECK_EQ_U64(existing, 1);
  uint64_t v = 0;
  CHECK(sl__hashmap_get(&m, "a", 1, &v) && v == 1);
  CHECK(sl__hashmap_set(&m, "a", 1, 3));
  CHECK(sl__hashmap_get(&m, "a", 1, &v) && v == 3);
  CHECK(sl__hashmap_set(&m, "b", 1, 4));
  CHECK_EQ_U64(m.count, 2);
  bool added = true;
  sl__hashval *slot = sl__hashmap_slot(&m, "b", 1, &added);
  CHECK(slot != NULL && !added && slot->u64 == 4);
  slot = sl__hashmap_slot(&m, "c", 1, &added);
  CHECK(slot != NULL && added && slot->u64 == 0);
  slot->u64 = 5;
  CHECK(sl__hashmap_get(&m, "c", 1, &v) && v == 5);
  CHECK_EQ_U64(m.count, 3);
  /* Insertion order, whatever the hashes. */
  CHECK(memcmp(m.entries[0].key, "a", 1) == 0 && memcmp(m.entries[1].key, "b", 1) == 0 &&
        memcmp(m.entries[2].key, "c", 1) == 0);
  sl__hashmap_free(&m);
  /* Freed: empty and reusable. */
  CHECK(!sl__hashmap_get(&m, "a", 1, &v));
  CHECK(sl__hashmap_put(&m, "a", 1, 9, NULL, NULL));
  CHECK(sl__hashmap_get(&m, "a", 1, &v) && v == 9);
  sl__hashmap_free(&m);
}

/* Binary keys: NUL bytes inside, keys that differ only in length, the empty key, u64 arrays. */
static void binary_keys(void) {
  sl__hashmap m;
  sl__hashmap_init(&m, SL_HASHMAP_COPY);
  const char k1[] = {'a', '\0', 'b'};
  const char k2[] = {'a', '\0', 'c'};
  const char k3[] = {'a', '\0'};
  const char k4[] = {'a'};
  CHECK(sl__hashmap_put(&m, k1, sizeof k1, 1, NULL, NULL));
  CHECK(sl__hashmap_put(&m, k2, sizeof k2, 2, NULL, NULL));
  CHECK(sl__hashmap_put(&m, k3, sizeof k3, 3, NULL, NULL));
  CHECK(sl__hashmap_put(&m, k4, sizeof k4, 4, NULL, NULL));
  CHECK(sl__hashmap_put(&m, "", 0, 5, NULL, NULL));
  CHECK(!sl__hashmap_put(&m, "zzz", 0, 6, NULL, NULL)); /* also the empty key */
  uint64_t v = 0;
  CHECK(sl__hashmap_get(&m, k1, sizeof k1, &v) && v == 1);
  CHECK(sl__hashmap_get(&m, k2, sizeof k2, &v) && v == 2);
  CHECK(sl__hashmap_get(&m, k3, sizeof k3, &v) && v == 3);
  CHECK(sl__hashmap_get(&m, k4, sizeof k4, &v) && v == 4);
  CHECK(sl__hashmap_get(&m, NULL, 0, &v) && v == 5);
  CHECK(!sl__hashmap_get(&m, "b", 1, &v));
  /* Geometry keys as the planner builds them: 5 × u64, many differing in one field only. */
  for (uint64_t i = 0; i < 5000; i++) {
    uint64_t key[5] = {i % 7, i, i % 3 == 0 ? 0 : 4096, 256, i % 5};
    CHECK(sl__hashmap_put(&m, key, sizeof key, 100 + i, NULL, NULL));
  }
  for (uint64_t i = 0; i < 5000; i++) {
    uint64_t key[5] = {i % 7, i, i % 3 == 0 ? 0 : 4096, 256, i % 5};
    CHECK(sl__hashmap_get(&m, key, sizeof key, &v) && v == 100 + i);
    key[4]++;
    CHECK(!sl__hashmap_get(&m, key, sizeof key, &v));
  }
  CHECK_EQ_U64(m.count, 5 + 5000);
  sl__hashmap_free(&m);
}

/* Copied keys survive the caller's buffer; borrowed ones are the caller's pointers. */
static void ownership(void) {
  sl__hashmap m;
  sl__hashmap_init(&m, SL_HASHMAP_COPY);
  char buf[70000]; /* larger than one key block */
  memset(buf, 'k', sizeof buf);
  CHECK(sl__hashmap_put(&m, buf, sizeof buf, 1, NULL, NULL));
  CHECK(sl__hashmap_put(&m, buf, 10, 2, NULL, NULL));
  CHECK(m.entries[0].key != buf && m.entries[1].key != buf);
  memset(buf, 'z', sizeof buf);
  CHECK(sl__hashmap_find(&m, buf, 10) == NULL);
  memset(buf, 'k', sizeof buf);
  uint64_t v = 0;
  CHECK(sl__hashmap_get(&m, buf, sizeof buf, &v) && v == 1);
  CHECK(sl__hashmap_get(&m, buf, 10, &v) && v == 2);
  sl__hashmap_free(&m);

  sl__hashmap_init(&m, SL_HASHMAP_BORROW);
  const char *name = "tensor";
  CHECK(sl__hashmap_put(&m, name, 6, 1, NULL, NULL));
  CHECK(m.entries[0].key == name);
  sl__hashmap_free(&m);

  /* A zeroed map is an empty borrowing map. */
  sl__hashmap z;
  memset(&z, 0, sizeof z);
  CHECK(sl__hashmap_find(&z, "x", 1) == NULL);
  CHECK(sl__hashmap_put(&z, name, 6, 7, NULL, NULL));
  CHECK(sl__hashmap_get(&z, "tensor", 6, &v) && v == 7);
  sl__hashmap_free(&z);
}

/* Pointer values are stored and given back as they are; the map never frees them. */
static void pointer_values(void) {
  sl__hashmap m;
  sl__hashmap_init(&m, SL_HASHMAP_COPY);
  int *objs = calloc(1000, sizeof *objs);
  for (int i = 0; i < 1000; i++) {
    char key[16];
    int len = snprintf(key, sizeof key, "p%d", i);
    bool added = false;
    sl__hashval *v = sl__hashmap_slot(&m, key, (size_t)len, &added);
    CHECK(v != NULL && added);
    if (v != NULL)
      v->ptr = &objs[i];
  }
  for (int i = 0; i < 1000; i++) {
    char key[16];
    int len = snprintf(key, sizeof key, "p%d", i);
    sl__hashval *v = sl__hashmap_find(&m, key, (size_t)len);
    CHECK(v != NULL && v->ptr == &objs[i]);
  }
  sl__hashmap_free(&m);
  objs[999] = 1; /* still ours */
  free(objs);
}

int main(void) {
  many_keys(SL_HASHMAP_COPY, NULL, MANY);
  many_keys(SL_HASHMAP_BORROW, NULL, MANY);
  /* Every key collides: probing alone must keep them apart (fewer keys: quadratic). */
  many_keys(SL_HASHMAP_COPY, constant_hash, 1500);
  replace_and_keep();
  binary_keys();
  ownership();
  pointer_values();
  return sl_test_finish();
}
