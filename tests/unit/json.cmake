# tests/unit/json.cmake — bounded JSON parsing (src/base/json.c).
sl_unit_test(test_json)
