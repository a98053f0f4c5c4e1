# tests/gpu/gpu.cmake — tests of the CUDA + NCCL backend (docs/GPU.md). Without a usable GPU the
# gpu-labelled ones print "SKIP: ..." and exit 77; the others check the no-GPU behaviour.
#   test_cuda_logic          unit  the backend's GPU-free decisions (CUDA builds)
#   test_cuda_nodevice_npN   mpi   backend creation fails alike on every rank without a GPU (1-3 ranks)
#   cli_cuda_no_gpu          mpi   `shardload load --device cuda` fails on both of 2 ranks, clearly
#   test_cuda_mock_npN       mpi   test_cuda_backend.c against cuda_mock.c (a CPU stand-in for the CUDA
#                                  runtime and NCCL): the backend's logic without a GPU (CUDA builds)
#   test_cuda_backend_npN    gpu   the backend's operations on real GPUs (CUDA builds; 1, 2, 4 ranks)
#   test_gpu_load_npN        gpu   fixtures loaded on cpu and on cuda, every byte compared (CUDA builds,
#                                  once the loader exists; 1, 2 ranks)
#   test_gpu_peers_npN       gpu   load from peers GPU to GPU against a cpu load (2, 4 ranks, a GPU each)
#   test_gpu_refit_npN       gpu   weight sync GPU to GPU against the reference (3, 4 ranks, a GPU each)

set(_sl_gpu_dir ${CMAKE_CURRENT_LIST_DIR})

# sl_gpu_exe(NAME) — builds tests/gpu/NAME.c against the test library.
function(sl_gpu_exe name)
  add_executable(${name} ${_sl_gpu_dir}/${name}.c)
  target_link_libraries(${name} PRIVATE sl_testlib)
  target_compile_options(${name} PRIVATE ${SL_WARNINGS})
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE)
  if(SL_HAVE_CUDA)
    # The tests call the runtime themselves (copies back for comparison): linked with the real one,
    # which the library then finds loaded.
    target_compile_definitions(${name} PRIVATE SL_TEST_HAVE_CUDA=1)
    target_link_libraries(${name} PRIVATE CUDA::cudart)
  endif()
endfunction()

# sl_gpu_mpi_test(NAME LABEL NP...) — NAME run under mpirun at each rank count, as NAME_npN.
function(sl_gpu_mpi_test name label)
  sl_gpu_exe(${name})
  foreach(np ${ARGN})
    add_test(NAME ${name}_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_np${np} PROPERTIES LABELS ${label} TIMEOUT 300 FIXTURES_REQUIRED models
      ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS ${np} SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

sl_gpu_mpi_test(test_cuda_nodevice mpi 1 2 3)
sl_script_test(cli_cuda_no_gpu mpi ${_sl_gpu_dir}/cli_no_gpu.sh)
set_tests_properties(cli_cuda_no_gpu PROPERTIES PROCESSORS 2 TIMEOUT 180)
# No load-time dependency on CUDA (readelf -d), and with CUDA's folders hidden (a private mount
# namespace, where permitted): a host load, import shardload, --device cuda failing at once.
sl_script_test(cli_no_cuda mpi ${_sl_gpu_dir}/cli_no_cuda.sh)
set_tests_properties(cli_no_cuda PROPERTIES TIMEOUT 180)
# shardload.torch gives the loader the GPU of the module's parameters (cuda_device).
add_test(NAME python_torch_device COMMAND /usr/bin/python3 ${_sl_gpu_dir}/test_torch_device.py)
set_tests_properties(python_torch_device PROPERTIES LABELS "python;unit" TIMEOUT 60 SKIP_RETURN_CODE 77
  ENVIRONMENT "${SL_TEST_ENV};${SL_PY_LIBRARY_ENV};PYTHONPATH=${PROJECT_SOURCE_DIR}/python;SHARDLOAD_LIBRARY=$<TARGET_FILE:shardload>")

if(SL_HAVE_CUDA)
  sl_gpu_exe(test_cuda_logic)
  add_test(NAME test_cuda_logic COMMAND test_cuda_logic)
  set_tests_properties(test_cuda_logic PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${SL_TEST_ENV}")

  sl_gpu_mpi_test(test_cuda_backend gpu 1 2 4)
  target_include_directories(test_cuda_backend SYSTEM PRIVATE ${NCCL_INCLUDE_DIR})
  if(NCCL_LIBRARY)
    target_link_libraries(test_cuda_backend PRIVATE ${NCCL_LIBRARY})
  endif()

  # The same checks against the CPU stand-in: the backend's sources with the stand-in's libcudart and
  # libnccl (tests/gpu/cuda_mock.cmake) linked, which the backend then finds loaded.
  file(GLOB _sl_cuda_backend_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backend/cuda/*.c)
  add_executable(test_cuda_mock ${_sl_gpu_dir}/test_cuda_backend.c ${_sl_cuda_backend_sources}
    ${PROJECT_SOURCE_DIR}/src/comm/comm.c ${PROJECT_SOURCE_DIR}/src/comm/mpi.c
    ${PROJECT_SOURCE_DIR}/src/comm/mpi_watchdog.c
    ${PROJECT_SOURCE_DIR}/src/base/err.c ${PROJECT_SOURCE_DIR}/src/base/util.c
    ${PROJECT_SOURCE_DIR}/src/base/clock.c
    ${PROJECT_SOURCE_DIR}/src/base/log.c ${PROJECT_SOURCE_DIR}/src/base/numa.c
    ${PROJECT_SOURCE_DIR}/src/engine/staging.c ${PROJECT_SOURCE_DIR}/src/api/status.c
    ${PROJECT_SOURCE_DIR}/tests/common/check.c ${PROJECT_SOURCE_DIR}/tests/common/values.c)
  target_include_directories(test_cuda_mock PRIVATE ${SL_PUBLIC_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/src
    ${PROJECT_SOURCE_DIR}/tests/common ${_sl_gpu_dir})
  target_include_directories(test_cuda_mock SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
  target_compile_options(test_cuda_mock PRIVATE ${SL_WARNINGS})
  target_compile_definitions(test_cuda_mock PRIVATE _GNU_SOURCE SL_TEST_CUDA_MOCK=1)
  target_link_libraries(test_cuda_mock PRIVATE MPI::MPI_C Threads::Threads m ${CMAKE_DL_LIBS}
    ${SL_CUDA_MOCK_RUNTIME} ${SL_CUDA_MOCK_NCCL})
  set(_sl_mock_env ${SL_TEST_ENV} "SL_TEST_BCAST_BYTES=1048576" "MOCK_CUDA_MAX_PITCH=2048")
  foreach(np 1 2 3 4)
    add_test(NAME test_cuda_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_cuda_mock>)
    set_tests_properties(test_cuda_mock_np${np} PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS ${np}
      ENVIRONMENT "${_sl_mock_env}")
  endforeach()
  # Two ranks, one GPU: creation must refuse with the shared-GPU message.
  add_test(NAME test_cuda_mock_shared COMMAND ${SL_MPIRUN} -np 2 $<TARGET_FILE:test_cuda_mock>)
  set_tests_properties(test_cuda_mock_shared PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS 2
    ENVIRONMENT "${_sl_mock_env};MOCK_CUDA_DEVICES=1;SL_TEST_SHARED_ONLY=1")
  # The loader is written against the public API; until src/api/loader.c exists this test is not built.
  if(EXISTS ${PROJECT_SOURCE_DIR}/src/api/loader.c)
    sl_gpu_mpi_test(test_gpu_load gpu 1 2)
    # Reload in place on real GPUs (docs/spec/DESIGN.md §10): labels reshard and gpu.
    sl_gpu_mpi_test(test_gpu_reload gpu 1 2)
    target_sources(test_gpu_reload PRIVATE ${_sl_gpu_dir}/gpu_ranks.c)
    set_tests_properties(test_gpu_reload_np1 test_gpu_reload_np2 PROPERTIES LABELS "reshard;gpu")
    # Load from peers GPU to GPU (docs/spec/DESIGN.md §11): one GPU per rank, or skipped (77).
    sl_gpu_mpi_test(test_gpu_peers gpu 2 4)
    target_sources(test_gpu_peers PRIVATE ${_sl_gpu_dir}/gpu_ranks.c)
    set_tests_properties(test_gpu_peers_np2 test_gpu_peers_np4 PROPERTIES LABELS "reshard;gpu")
    # Weight sync GPU to GPU (docs/spec/DESIGN.md §13): one GPU per rank, or skipped (77).
    sl_gpu_mpi_test(test_gpu_refit gpu 3 4)
    target_sources(test_gpu_refit PRIVATE ${_sl_gpu_dir}/gpu_ranks.c ${PROJECT_SOURCE_DIR}/tests/mpi/refit_common.c
      ${PROJECT_SOURCE_DIR}/tests/mpi/reshard_common.c ${PROJECT_SOURCE_DIR}/tests/common/reference.c
      ${PROJECT_SOURCE_DIR}/tests/mpi/load_check.c)
    target_include_directories(test_gpu_refit PRIVATE ${PROJECT_SOURCE_DIR}/tests/mpi)
    target_link_libraries(test_gpu_refit PRIVATE m)
    set_tests_properties(test_gpu_refit_np3 test_gpu_refit_np4 PROPERTIES LABELS "refit;gpu")
  else()
    message(STATUS "shardload: src/api/loader.c not present yet: test_gpu_load not built")
  endif()
endif()
