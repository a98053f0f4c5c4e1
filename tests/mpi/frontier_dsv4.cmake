# tests/mpi/frontier_dsv4.cmake — DeepSeek-V4 (flat names, compressors and indexers by compress ratio,
# hash routing tables held I32, FP4 or FP8 experts, block fp8 with E8M0 or F32 scales named X.scale)
# byte-exact at 1, 2, 3 and 4 ranks against the independent reference (tests/common/reference_dsv4.c),
# with its bad inputs: test_load_dsv4 (labels mpi;frontier).
sl_mpi_test(test_load_dsv4)
target_sources(test_load_dsv4 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_dsv4 PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_load_dsv4_np${np} PROPERTIES LABELS "mpi;frontier")
endforeach()
