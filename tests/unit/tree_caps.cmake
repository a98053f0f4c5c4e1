# tests/unit/tree_caps.cmake — src/'s size caps (file and function lines) held over tests/common/
# and scripts/ too: tests/unit/test_tree_caps.py.
sl_script_test(tree_caps unit ${CMAKE_CURRENT_LIST_DIR}/test_tree_caps.py)
set_tests_properties(tree_caps PROPERTIES TIMEOUT 60)
