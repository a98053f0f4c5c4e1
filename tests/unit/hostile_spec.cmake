# tests/unit/hostile_spec.cmake — deeply nested or very long spec expressions end with a clear
# error naming the limit, never a crash: tests/unit/test_hostile_spec.py.
sl_script_test(hostile_spec unit ${CMAKE_CURRENT_LIST_DIR}/test_hostile_spec.py)
set_tests_properties(hostile_spec PROPERTIES TIMEOUT 120)

# The spec key "dtype" (a parameter held in another dtype than its checkpoint tensors): the dry run
# counts the held size; a dtype that cannot be held, or one the checkpoint cannot be converted to,
# is refused naming the spec and the parameter (tests/unit/test_planned_dtype.py).
sl_script_test(planned_dtype_spec unit ${CMAKE_CURRENT_LIST_DIR}/test_planned_dtype.py)
set_tests_properties(planned_dtype_spec PROPERTIES TIMEOUT 120)
