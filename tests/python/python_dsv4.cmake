# tests/python/python_dsv4.cmake — DeepSeek-V4 through the Python package at 1-4 ranks against
# tests/python/test_load_dsv4.py's own reference (labels python;frontier).
sl_python_test(python_load_dsv4 test_load_dsv4.py 1 2 3 4)
foreach(np 1 2 3 4)
  set_tests_properties(python_load_dsv4_np${np} PROPERTIES LABELS "python;frontier")
endforeach()
