# tests/mpi/multimodal.cmake — issue 39 items 6 and 8 (labels mpi and frontier): GPT-OSS
# unquantized experts, and the multimodal wrappers with their vision towers, at 1, 2, 3 and 4 ranks
# against the independent reference (tests/common/reference.c).
function(sl_frontier_mpi_test name)
  sl_mpi_test(${name})
  target_sources(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
    ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
  target_link_libraries(${name} PRIVATE m)
  foreach(np 1 2 3 4)
    set_tests_properties(${name}_np${np} PROPERTIES LABELS "mpi;frontier")
  endforeach()
endfunction()

sl_frontier_mpi_test(test_load_gpt_oss_bf16)
sl_frontier_mpi_test(test_load_multimodal)
