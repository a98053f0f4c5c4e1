# tests/mpi/pt.cmake — PyTorch (torch.save) checkpoints, docs/spec/FILES.md §8: byte-exact loads of
# fixtures re-saved with torch at 1-4 ranks against the reference of the safetensors originals
# (skipped, exit 77, when python has no torch).
sl_mpi_test(test_load_pt)
target_sources(test_load_pt PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_pt PRIVATE m)
foreach(np 1 2 3 4)
  set_tests_properties(test_load_pt_np${np} PROPERTIES SKIP_RETURN_CODE 77)
endforeach()
