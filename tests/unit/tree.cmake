# tests/unit/tree.cmake — the shape of src/ (file and function sizes, include rules, one owner per
# constant, components chosen by folder): tests/unit/test_tree.py.
sl_script_test(source_tree unit ${CMAKE_CURRENT_LIST_DIR}/test_tree.py)
set_tests_properties(source_tree PROPERTIES TIMEOUT 60)
