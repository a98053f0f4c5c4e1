# tests/unit/doc_shape.cmake — the first documents stay short enough to scan: no line of
# docs/ARCHITECTURE.md over 400 characters, README.md at most 350 lines, no comment block of the
# public headers over 15 lines and their contents list true (tests/unit/test_doc_shape.py).
sl_script_test(doc_shape unit ${CMAKE_CURRENT_LIST_DIR}/test_doc_shape.py)
set_tests_properties(doc_shape PROPERTIES FIXTURES_REQUIRED "" TIMEOUT 60)
