# fixtures.cmake — registers the test of the fixture generator: tests/unit/test_fixtures.py runs
# scripts/make-fixture into a temporary folder and reads everything back with its own parser.
if(Python3_EXECUTABLE)
  set(SL_FIXTURE_PYTHON ${Python3_EXECUTABLE})
else()
  set(SL_FIXTURE_PYTHON python3)
endif()
sl_script_test(fixture_generator unit ${SL_FIXTURE_PYTHON}
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_fixtures.py)
