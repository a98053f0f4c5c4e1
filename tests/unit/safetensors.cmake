# tests/unit/safetensors.cmake — the safetensors reader and writer (docs/spec/SAFETENSORS.md §4–§7).
sl_unit_test(test_safetensors)
