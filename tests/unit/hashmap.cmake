# tests/unit/hashmap.cmake — the library's hash table (src/base/hashmap.c).
sl_unit_test(test_hashmap)
