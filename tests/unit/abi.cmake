# tests/unit/abi.cmake — the version and the ABI (shardload/core.h section 0): the library's
# version and sl_abi, and the size rule of the structs the caller allocates (test_abi.c); every
# copy of the version number against project(VERSION) (test_version.py).
sl_unit_test(test_abi)
sl_script_test(test_version unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_version.py)
set_tests_properties(test_version PROPERTIES TIMEOUT 60 FIXTURES_REQUIRED "" ENVIRONMENT "${SL_TEST_ENV};${SL_PY_LIBRARY_ENV}")
