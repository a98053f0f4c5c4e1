# tests/gpu/planned_dtype_mock.cmake — a planned conversion (the spec key "dtype") with device=cuda on
# the CPU stand-in of CUDA (label gpumock): refused before any byte is read when left to the loader
# (the library converts in host memory only), loaded when the caller binds device buffers at the
# checkpoint's dtype (tests/gpu/test_gpu_planned_dtype.c). The spec is tests/mpi/planned_dtype.cmake's.
# Also a caller-described plan loaded with device=cuda against the same on the host (label recorded).
if(NOT SL_HAVE_CUDA OR NOT COMMAND sl_gpumock_exe)
  return()
endif()
sl_gpumock_exe(test_gpu_planned_dtype_mock ${CMAKE_CURRENT_LIST_DIR}/test_gpu_planned_dtype.c
  SL_TEST_F32_NORMS_SPEC="${SL_F32_NORMS_SPEC}")
foreach(np 1 2)
  add_test(NAME test_gpu_planned_dtype_mock_np${np}
    COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_gpu_planned_dtype_mock>)
  set_tests_properties(test_gpu_planned_dtype_mock_np${np} PROPERTIES LABELS "gpumock;recorded" TIMEOUT 120
    PROCESSORS ${np} FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")
endforeach()
