# tests/unit/tree_files.cmake — the tree tests read the project's files (git's tracked and untracked,
# not ignored ones; without git, the tree less its .gitignore), never ignored build outputs such as
# python/shardload.egg-info/ (tests/unit/test_tree_files.py); the Python package's long description
# links nothing that resolves only inside the repository (tests/unit/test_package_description.py).
sl_script_test(tree_files unit ${CMAKE_CURRENT_LIST_DIR}/test_tree_files.py)
set_tests_properties(tree_files PROPERTIES FIXTURES_REQUIRED "" TIMEOUT 120)
sl_script_test(package_description unit ${CMAKE_CURRENT_LIST_DIR}/test_package_description.py)
set_tests_properties(package_description PROPERTIES FIXTURES_REQUIRED "" TIMEOUT 60)
