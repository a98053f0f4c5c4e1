# tests/python/surface.cmake — the package's public surface (after python.cmake, whose
# sl_python_test and SL_PY_ENV it uses):
#   python_finalizer: a Loader dropped without close() releases this rank's memory alone and warns
#     (test_finalizer.py, at 1 and 2 ranks);
#   python_stubs: python/shardload/__init__.pyi names and parameters against the running package;
#   python_types: mypy --strict on tests/python/typed_usage.py, and misuses it must reject
#     (skipped, 77, without Debian's mypy).
sl_python_test(python_finalizer test_finalizer.py 1 2)
add_test(NAME python_stubs COMMAND ${SL_PY} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_python_stubs.py)
set_tests_properties(python_stubs PROPERTIES LABELS "python;unit" TIMEOUT 60
  ENVIRONMENT "${SL_PY_ENV};${SL_PY_LIBRARY_ENV}")
add_test(NAME python_types COMMAND ${SL_PY} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_python_types.py)
set_tests_properties(python_types PROPERTIES LABELS "python;unit" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${SL_TEST_ENV}")
