# tests/unit/calls.cmake — who calls whom in the library (no cycle between files, calls down the
# layers of docs/ARCHITECTURE.md), read from the objects' symbols: tests/unit/test_calls.py.
sl_script_test(source_calls unit ${CMAKE_CURRENT_LIST_DIR}/test_calls.py "$<TARGET_OBJECTS:shardload_obj>")
set_tests_properties(source_calls PROPERTIES TIMEOUT 120)
