# tests/unit/tree_state.cmake — src/'s state: no hidden mutable globals (each says why it is
# process-wide), every lock says what it guards, lock orders written next to the locks:
# tests/unit/test_tree_state.py.
sl_script_test(tree_state unit ${CMAKE_CURRENT_LIST_DIR}/test_tree_state.py)
set_tests_properties(tree_state PROPERTIES TIMEOUT 60)
