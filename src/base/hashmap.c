/*
 * base/hashmap.c — implementation of base/hashmap.h. Linear probing over an index of entry
 * numbers (4 bytes a slot, at most half full, so probes stay short); the 24-byte entries are
 * stored once, densely, and keep 32 bits of their hash, so that growing never hashes a key again
 * and a probe compares key bytes only when those bits match.
 */
#include "base/hashmap.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_INDEX 64u
#define FIRST_ENTRIES 32u
#define KEY_BLOCK ((size_t)64 << 10)
/* The index holds entry number + 1 in a uint32_t, 0 meaning empty, and positions come from 32
 * hash bits: at most 2^31 - 1 entries keep the index within 2^32 slots. */
#define MAX_ENTRIES ((size_t)INT32_MAX)

struct sl__hashmap_block {
  sl__hashmap_block *next;
  size_t used;
  size_t cap;
  unsigned char data[];
};

void sl__hashmap_init(sl__hashmap *m, sl__hashmap_keys keys) {
  memset(m, 0, sizeof *m);
  m->keys = keys;
  m->hash = sl__hash_bytes;
}

void sl__hashmap_free(sl__hashmap *m) {
  free(m->entries);
  free(m->index);
  while (m->blocks != NULL) {
    sl__hashmap_block *next = m->blocks->next;
    free(m->blocks);
    m->blocks = next;
  }
  m->entries = NULL;
  m->index = NULL;
  m->count = m->entries_cap = m->index_cap = 0;
}

/* The index slot holding key, or the empty slot where it would go. */
static size_t probe(const sl__hashmap *m, const void *key, size_t key_len, uint32_t hash) {
  size_t mask = m->index_cap - 1;
  size_t j = (size_t)hash & mask;
  while (m->index[j] != 0) {
    const sl__hashmap_entry *e = &m->entries[m->index[j] - 1];
    if (e->hash == hash && e->key_len == key_len && (key_len == 0 || memcmp(e->key, key, key_len) == 0))
      return j;
    j = (j + 1) & mask;
  }
  return j;
}

static bool grow_index(sl__hashmap *m) {
  size_t cap = m->index_cap != 0 ? m->index_cap : FIRST_INDEX;
  while ((m->count + 1) > cap / 2) {
    if (cap > SIZE_MAX / 2 / sizeof *m->index)
      return false;
    cap *= 2;
  }
  uint32_t *index = calloc(cap, sizeof *index);
  if (index == NULL)
    return false;
  for (size_t i = 0; i < m->count; i++) {
    size_t j = (size_t)m->entries[i].hash & (cap - 1);
    while (index[j] != 0)
      j = (j + 1) & (cap - 1);
    index[j] = (uint32_t)(i + 1);
  }
  free(m->index);
  m->index = index;
  m->index_cap = cap;
  return true;
}

static bool grow_entries(sl__hashmap *m) {
  size_t cap = m->entries_cap != 0 ? m->entries_cap : FIRST_ENTRIES;
  if (m->entries_cap != 0) {
    if (cap > SIZE_MAX / 2 / sizeof *m->entries)
      return false;
    cap *= 2;
  }
  sl__hashmap_entry *entries = realloc(m->entries, cap * sizeof *entries);
  if (entries == NULL)
    return false;
  m->entries = entries;
  m->entries_cap = cap;
  return true;
}

/* A copy of the key in the map's blocks (SL_HASHMAP_COPY), or NULL when out of memory. */
static const void *copy_key(sl__hashmap *m, const void *key, size_t key_len) {
  sl__hashmap_block *b = m->blocks;
  if (b == NULL || b->cap - b->used < key_len) {
    size_t cap = key_len > KEY_BLOCK ? key_len : KEY_BLOCK;
    if (cap > SIZE_MAX - sizeof *b)
      return NULL;
    b = malloc(sizeof *b + cap);
    if (b == NULL)
      return NULL;
    b->used = 0;
    b->cap = cap;
    b->next = m->blocks;
    m->blocks = b;
  }
  unsigned char *dst = b->data + b->used;
  if (key_len > 0)
    memcpy(dst, key, key_len);
  b->used += key_len;
  return dst;
}

/* A zeroed map is an empty borrowing map with the default hash. */
static uint32_t hash_of(const sl__hashmap *m, const void *key, size_t key_len) {
  return (uint32_t)(m->hash != NULL ? m->hash(key, key_len) : sl__hash_bytes(key, key_len));
}

sl__hashval *sl__hashmap_find(const sl__hashmap *m, const void *key, size_t key_len) {
  if (m->count == 0)
    return NULL;
  size_t j = probe(m, key, key_len, hash_of(m, key, key_len));
  return m->index[j] != 0 ? &m->entries[m->index[j] - 1].value : NULL;
}

sl__hashval *sl__hashmap_slot(sl__hashmap *m, const void *key, size_t key_len, bool *added) {
  *added = false;
  uint32_t hash = hash_of(m, key, key_len);
  if (m->count > 0) {
    size_t j = probe(m, key, key_len, hash);
    if (m->index[j] != 0)
      return &m->entries[m->index[j] - 1].value;
  }
  /* Every allocation first, so that a failure leaves the map as it was. */
  if (m->count >= MAX_ENTRIES || key_len > UINT32_MAX)
    return NULL;
  if ((m->count + 1) > m->index_cap / 2 && !grow_index(m))
    return NULL;
  if (m->count == m->entries_cap && !grow_entries(m))
    return NULL;
  const void *stored = m->keys == SL_HASHMAP_COPY ? copy_key(m, key, key_len) : key;
  if (stored == NULL)
    return NULL;
  size_t j = probe(m, key, key_len, hash);
  sl__hashmap_entry *e = &m->entries[m->count];
  e->key = stored;
  e->key_len = (uint32_t)key_len;
  e->hash = hash;
  e->value.u64 = 0;
  m->count++;
  m->index[j] = (uint32_t)m->count;
  *added = true;
  return &e->value;
}

bool sl__hashmap_put(sl__hashmap *m, const void *key, size_t key_len, uint64_t value, uint64_t *existing,
                     bool *oom) {
  bool added = false;
  sl__hashval *v = sl__hashmap_slot(m, key, key_len, &added);
  if (oom != NULL)
    *oom = v == NULL;
  if (v == NULL)
    return false;
  if (!added) {
    if (existing != NULL)
      *existing = v->u64;
    return false;
  }
  v->u64 = value;
  return true;
}

bool sl__hashmap_set(sl__hashmap *m, const void *key, size_t key_len, uint64_t value) {
  bool added = false;
  sl__hashval *v = sl__hashmap_slot(m, key, key_len, &added);
  if (v == NULL)
    return false;
  v->u64 = value;
  return true;
}

bool sl__hashmap_get(const sl__hashmap *m, const void *key, size_t key_len, uint64_t *value) {
  const sl__hashval *v = sl__hashmap_find(m, key, key_len);
  if (v == NULL)
    return false;
  *value = v->u64;
  return true;
}
