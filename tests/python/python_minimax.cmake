# tests/python/python_minimax.cmake — MiniMax-M2 through the Python package at 1-4 ranks against
# tests/python/test_load_minimax.py's own reference (labels python;frontier).
sl_python_test(python_load_minimax test_load_minimax.py 1 2 3 4)
foreach(np 1 2 3 4)
  set_tests_properties(python_load_minimax_np${np} PROPERTIES LABELS "python;frontier")
endforeach()
