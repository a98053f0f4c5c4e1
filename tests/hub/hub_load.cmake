# Rank 0 downloads through the local Hub server, four ranks load (tests/hub/test_hub_load.py).
if(Python3_Interpreter_FOUND)
  add_test(NAME hub_load_4ranks COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_hub_load.py)
else()
  add_test(NAME hub_load_4ranks COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(hub_load_4ranks PROPERTIES LABELS hub TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED models
  PROCESSORS 4 ENVIRONMENT "${SL_TEST_ENV}")

# A load overlapping its download, at 1 and 2 ranks (tests/hub/test_hub_overlap.py).
if(Python3_Interpreter_FOUND)
  add_test(NAME hub_overlap COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_hub_overlap.py)
else()
  add_test(NAME hub_overlap COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(hub_overlap PROPERTIES LABELS hub TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED models
  PROCESSORS 2 ENVIRONMENT "${SL_TEST_ENV}")

# A weight file smaller than the header request, fetched once (tests/hub/test_hub_overlap_small.py).
if(Python3_Interpreter_FOUND)
  add_test(NAME hub_overlap_small COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_hub_overlap_small.py)
else()
  add_test(NAME hub_overlap_small COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(hub_overlap_small PROPERTIES LABELS hub TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED models
  PROCESSORS 2 ENVIRONMENT "${SL_TEST_ENV}")

# Weights already in the cache are ready at once in an overlapped load (tests/hub/test_hub_overlap_cached.py).
if(Python3_Interpreter_FOUND)
  add_test(NAME hub_overlap_cached COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_hub_overlap_cached.py)
else()
  add_test(NAME hub_overlap_cached COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(hub_overlap_cached PROPERTIES LABELS hub TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED models
  PROCESSORS 2 ENVIRONMENT "${SL_TEST_ENV}")

# An overlapped load into a cache only rank 0 sees (tests/hub/test_hub_overlap_local.py): the others
# receive every byte; rank 0's token in the model folder tells who sees the cache.
if(Python3_Interpreter_FOUND)
  add_test(NAME hub_overlap_local COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_hub_overlap_local.py)
else()
  add_test(NAME hub_overlap_local COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(hub_overlap_local PROPERTIES LABELS hub TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED models
  PROCESSORS 3 ENVIRONMENT "${SL_TEST_ENV}")

# Reload in place as a repository's main branch moves (labels reshard and hub): only the changed
# file downloaded, every tensor the new commit's, at 2 ranks (tests/hub/test_hub_reload.py).
if(Python3_Interpreter_FOUND)
  add_test(NAME hub_reload COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_hub_reload.py)
else()
  add_test(NAME hub_reload COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(hub_reload PROPERTIES LABELS "reshard;hub" TIMEOUT 300 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED models PROCESSORS 2
  ENVIRONMENT "${SL_TEST_ENV};SHARDLOAD_LIBRARY=$<TARGET_FILE:shardload>")
