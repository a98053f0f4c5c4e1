# tests/unit/format.cmake — clang-format would change nothing under src/, include/ and tests/
# (tests/unit/test_format.sh; skipped without clang-format 14 or newer).
sl_script_test(clang_format unit ${CMAKE_CURRENT_LIST_DIR}/test_format.sh)
set_tests_properties(clang_format PROPERTIES FIXTURES_REQUIRED "" TIMEOUT 120)
