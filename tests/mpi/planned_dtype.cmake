# tests/mpi/planned_dtype.cmake — a parameter held in another dtype than its checkpoint tensors (the
# spec key "dtype"): the llama fixture's norms held in F32, byte-exact against an independent
# conversion of the reference at 1-4 ranks in every layout; mmap, the caller's buffers (bind and
# bind_as), the saved copy and a reload on top (tests/mpi/test_planned_dtype.c).
#
# The spec: specs/llama.json with "dtype": "F32" on its three norms, written into the build tree
# (tests/gpu/planned_dtype_mock.cmake uses it too).
file(READ ${PROJECT_SOURCE_DIR}/specs/llama.json _sl_spec)
foreach(_sl_norm "model.layers.{layer}.input_layernorm.weight"
                 "model.layers.{layer}.post_attention_layernorm.weight" "model.norm.weight")
  string(REPLACE "\"name\": \"${_sl_norm}\"," "\"name\": \"${_sl_norm}\", \"dtype\": \"F32\"," _sl_spec
    "${_sl_spec}")
endforeach()
set(SL_F32_NORMS_SPEC ${CMAKE_CURRENT_BINARY_DIR}/llama_f32_norms.json)
file(WRITE ${SL_F32_NORMS_SPEC} "${_sl_spec}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/specs/llama.json)

sl_mpi_test(test_planned_dtype)
target_sources(test_planned_dtype PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c
  ${CMAKE_CURRENT_SOURCE_DIR}/mpi/load_check.c)
target_compile_definitions(test_planned_dtype PRIVATE SL_TEST_F32_NORMS_SPEC="${SL_F32_NORMS_SPEC}")
target_link_libraries(test_planned_dtype PRIVATE m)
