# tests/unit/safetensors.cmake — the safetensors reader and writer (SAFETENSORS.md §4–§8).
sl_unit_test(test_safetensors)
