# tests/mpi/families.cmake — byte-exact loads of the later families' fixtures (Phi-3, Gemma-3,
# GLM-4-MoE, GPT-OSS) at 1, 2, 3 and 4 ranks against the independent reference
# (tests/common/reference.c), as verify.cmake does for the first families.
sl_mpi_test(test_load_families)
target_sources(test_load_families PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_families PRIVATE m)

# Llama-4 (text_config, fused experts in the checkpoint's orientation, vision tower refused or
# skipped with skip_vision) at 1, 2, 3 and 4 ranks against the same reference.
sl_mpi_test(test_load_llama4)
target_sources(test_load_llama4 PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_link_libraries(test_load_llama4 PRIVATE m)
