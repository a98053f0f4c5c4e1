/*
 * base/hashmap.h — the library's one hash table: byte-string keys → a u64 or a pointer.
 *
 * Open addressing over an index of entry numbers; the entries themselves stay in insertion order
 * (m->entries[0 .. m->count), readable by callers), so walking a map is deterministic. No removal:
 * every user builds a map, looks things up, and frees it.
 *
 * Ownership of keys is chosen once, at init:
 *   SL_HASHMAP_BORROW: the map keeps the caller's pointer; the key bytes must stay valid and
 *                      unchanged while the map lives (names inside a parsed header, a catalog);
 *   SL_HASHMAP_COPY:   the map copies each new key into blocks it owns and frees them with itself
 *                      (keys built on the stack, or inside arrays that move as they grow).
 * Values are never owned: a pointer value is the caller's to free.
 */
#ifndef SL_HASHMAP_H
#define SL_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl__hashmap_keys {
  SL_HASHMAP_BORROW,
  SL_HASHMAP_COPY,
} sl__hashmap_keys;

typedef union sl__hashval {
  uint64_t u64;
  void *ptr;
} sl__hashval;

typedef struct sl__hashmap_entry {
  const void *key;  /* borrowed, or inside the map's key blocks */
  uint32_t key_len; /* keys are shorter than 4 GiB */
  uint32_t hash;    /* low half of the key's hash: index position and a cheap first compare */
  sl__hashval value;
} sl__hashmap_entry;

typedef struct sl__hashmap_block sl__hashmap_block;

typedef struct sl__hashmap {
  sl__hashmap_keys keys;
  uint64_t (*hash)(const void *key, size_t len); /* sl__hash_bytes; replaceable right after init */
  sl__hashmap_entry *entries;                    /* insertion order */
  size_t count;
  size_t entries_cap;
  uint32_t *index; /* entry number + 1; 0 = empty. Power of two, at most half full */
  size_t index_cap;
  sl__hashmap_block *blocks; /* copied keys (SL_HASHMAP_COPY) */
} sl__hashmap;

/* A zeroed sl__hashmap is also a valid empty map (borrowed keys, default hash). */
void sl__hashmap_init(sl__hashmap *m, sl__hashmap_keys keys);
/* Frees the map's own memory (index, entries, copied keys); the map is then empty and reusable. */
void sl__hashmap_free(sl__hashmap *m);

/* The value of key, or NULL when absent. */
sl__hashval *sl__hashmap_find(const sl__hashmap *m, const void *key, size_t key_len);
/* The value of key, adding the key with a zero value first when absent (*added says which).
 * NULL when out of memory, for a key of 4 GiB or more, or beyond 2^31 - 1 entries; the map is then
 * unchanged. */
sl__hashval *sl__hashmap_slot(sl__hashmap *m, const void *key, size_t key_len, bool *added);

/* Adds key → value when absent and returns true. When present, returns false and stores its
 * value in *existing (may be NULL). *oom (may be NULL) says whether a false means out of memory. */
bool sl__hashmap_put(sl__hashmap *m, const void *key, size_t key_len, uint64_t value, uint64_t *existing,
                     bool *oom);
/* Adds or replaces key → value; false only when out of memory. */
bool sl__hashmap_set(sl__hashmap *m, const void *key, size_t key_len, uint64_t value);
/* Returns true and *value when key is present. */
bool sl__hashmap_get(const sl__hashmap *m, const void *key, size_t key_len, uint64_t *value);

#endif
