# tests/unit/hostile_spec.cmake — deeply nested or very long spec expressions end with a clear
# error naming the limit, never a crash: tests/unit/test_hostile_spec.py.
sl_script_test(hostile_spec unit ${CMAKE_CURRENT_LIST_DIR}/test_hostile_spec.py)
set_tests_properties(hostile_spec PROPERTIES TIMEOUT 120)
