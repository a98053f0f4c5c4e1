# tests/python/python_dsa.cmake — DeepSeek-V3.2, GLM-5 and their MTP draft through the Python
# package at 1-4 ranks against tests/python/test_load_dsa.py's own reference (labels python;frontier).
sl_python_test(python_load_dsa test_load_dsa.py 1 2 3 4)
foreach(np 1 2 3 4)
  set_tests_properties(python_load_dsa_np${np} PROPERTIES LABELS "python;frontier")
endforeach()
