# tests/mpi/frontier_dsa.cmake — DeepSeek-V3.2 and GLM-5 (MLA + the sparse-attention indexer + MoE)
# and their multi-token-prediction draft, byte-exact at 1, 2, 3 and 4 ranks against the independent
# reference (tests/common/reference_dsa.c), with their bad inputs: test_load_dsa (labels mpi;frontier).
sl_mpi_test(test_load_dsa)
target_sources(test_load_dsa PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_dsa PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_load_dsa_np${np} PROPERTIES LABELS "mpi;frontier")
endforeach()
