# tests/unit/docrefs.cmake — every *.md name and § section cited in the repository exists
# (docs/spec/README.md), and so does every path of a project file cited in a comment of src/,
# include/ or tests/ (api/loader.c once cited a watchdog file of engine/ long after it moved).
sl_script_test(doc_refs unit ${CMAKE_CURRENT_LIST_DIR}/test_doc_refs.py)
set_tests_properties(doc_refs PROPERTIES FIXTURES_REQUIRED "")
