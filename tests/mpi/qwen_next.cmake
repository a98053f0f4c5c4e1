# tests/mpi/qwen_next.cmake — Qwen3-Next and Qwen3.5 (gated DeltaNet sections, gated attention, shared
# experts with their gate, stacked 3-D experts, the ConditionalGeneration wrapper with its vision
# tower skipped) loaded byte-exact at 1, 2, 3 and 4 ranks against the independent reference, and
# their refusals. Labels mpi and frontier (issue 39's families).
sl_mpi_test(test_load_qwen_next)
target_sources(test_load_qwen_next PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_qwen_next PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_load_qwen_next_np${np} PROPERTIES LABELS "mpi;frontier")
endforeach()
