# tests/gpu/gpumock.cmake — the whole library against the CPU stand-in of the CUDA runtime and NCCL
# (tests/gpu/cuda_mock.c, built as libcudart/libnccl by cuda_mock.cmake), label gpumock: the loader's
# GPU path end to end where no GPU exists. Programs linked with shardload_gpumock hold the stand-in
# already (the library finds it loaded); the command-line tests run the real `shardload` and
# libshardload.so with the stand-in's folder on LD_LIBRARY_PATH. test_gpu_load runs at 1-4 ranks,
# comparing every parameter of a --device cuda load with the --device cpu load of the same model;
# test_gpu_overlap_mock measures waits and uploads in flight on the mock's streams.

if(NOT SL_HAVE_CUDA)
  return()
endif()
set(_sl_mock_dir ${CMAKE_CURRENT_LIST_DIR})
# The command-line tool and libshardload.so as installed, finding the stand-in at run time.
set(_sl_cli_mock_env "SL_CLI_MOCK=${PROJECT_BINARY_DIR}/shardload" "LD_LIBRARY_PATH=${SL_CUDA_MOCK_DIR}"
  "SL_MPI_INIT_PROBE=$<TARGET_FILE:mpi_init_probe>")

# sl_gpumock_exe(NAME SOURCE [DEFINITION...]) — a test program against the library on the mock.
function(sl_gpumock_exe name source)
  add_executable(${name} ${source} ${PROJECT_SOURCE_DIR}/tests/common/check.c
    ${PROJECT_SOURCE_DIR}/tests/common/values.c)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
  target_link_libraries(${name} PRIVATE shardload_gpumock)
  target_compile_options(${name} PRIVATE ${SL_WARNINGS})
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE ${ARGN})
endfunction()

sl_gpumock_exe(test_gpu_load_mock ${_sl_mock_dir}/test_gpu_load.c SL_TEST_HAVE_CUDA=1 SL_TEST_CUDA_MOCK=1)
foreach(np 1 2 3 4)
  add_test(NAME test_gpu_load_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_gpu_load_mock>)
  set_tests_properties(test_gpu_load_mock_np${np} PROPERTIES LABELS gpumock TIMEOUT 300 PROCESSORS ${np}
    FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV};MOCK_CUDA_LEGACY_MS=500")
endforeach()

# What a user is told about driver and NCCL versions (one rank; the mock's versions set per case).
sl_gpumock_exe(test_gpu_versions_mock ${_sl_mock_dir}/test_gpu_versions_mock.c)
foreach(mode_env "ok" "driver|MOCK_CUDA_DRIVER_VERSION=12040" "nodriver|MOCK_CUDA_DRIVER_VERSION=0"
                 "nccl|MOCK_NCCL_VERSION=22100")
  string(REPLACE "|" ";" parts "${mode_env}")
  list(GET parts 0 mode)
  list(REMOVE_AT parts 0)
  set(extra "${parts}")
  add_test(NAME test_gpu_versions_mock_${mode} COMMAND ${SL_MPIRUN} -np 1 $<TARGET_FILE:test_gpu_versions_mock> ${mode})
  set_tests_properties(test_gpu_versions_mock_${mode} PROPERTIES LABELS gpumock TIMEOUT 120
    FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV};${extra}")
endforeach()

# Deliveries into transposed parameters (Llama-4's experts) through the CUDA backend on the mock:
# tests/unit/test_transpose.c's checks, a device-memory bucket included.
sl_gpumock_exe(test_transpose_cuda_mock ${PROJECT_SOURCE_DIR}/tests/unit/test_transpose.c SL_TEST_CUDA_MOCK=1)
add_test(NAME test_transpose_cuda_mock COMMAND ${SL_MPIRUN} -np 1 $<TARGET_FILE:test_transpose_cuda_mock>)
set_tests_properties(test_transpose_cuda_mock PROPERTIES LABELS gpumock TIMEOUT 120 PROCESSORS 1
  ENVIRONMENT "${SL_TEST_ENV}")

# The command-line tool on the mock: `shardload load --device cuda` end to end, compared byte for
# byte with `--device cpu` (tests/gpu/cli_mock_load.sh), a broadcast whose root is slow to read
# while the watchdog's timeout is short (the wait is extended, not failed), and the rank's device
# current before MPI_Init (mpi_init_probe.c, preloaded, reports it).
add_test(NAME test_cli_cuda_mock COMMAND bash ${_sl_mock_dir}/cli_mock_load.sh)
set_tests_properties(test_cli_cuda_mock PROPERTIES LABELS gpumock TIMEOUT 300 PROCESSORS 2
  FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV};${_sl_cli_mock_env}")

# How the loader keeps the GPU busy (the mock counts waits and uploads in flight per stream): the
# readers' streams are not waited for after each bucket, the io_uring reader keeps several slots'
# uploads in flight (uploads made slow), reader threads run on the GPU's NUMA node (a fake sysfs).
sl_gpumock_exe(test_gpu_overlap_mock ${_sl_mock_dir}/test_gpu_overlap_mock.c)
foreach(np 1 2)
  add_test(NAME test_gpu_overlap_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_gpu_overlap_mock>)
  set_tests_properties(test_gpu_overlap_mock_np${np} PROPERTIES LABELS gpumock TIMEOUT 300 PROCESSORS ${np}
    FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV};MOCK_CUDA_OP_US=300")
endforeach()

# Reload in place on the GPU path (labels reshard, gpumock): device memory at the same pointers
# equal to a cpu load of each checkpoint, the NCCL communicators made again and released.
sl_gpumock_exe(test_gpu_reload_mock ${_sl_mock_dir}/test_gpu_reload.c SL_TEST_HAVE_CUDA=1 SL_TEST_CUDA_MOCK=1)
target_sources(test_gpu_reload_mock PRIVATE ${_sl_mock_dir}/gpu_ranks.c)
foreach(np 1 2 3 4)
  add_test(NAME test_gpu_reload_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_gpu_reload_mock>)
  set_tests_properties(test_gpu_reload_mock_np${np} PROPERTIES LABELS "reshard;gpumock" TIMEOUT 300
    PROCESSORS ${np} FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")
endforeach()

# Load from peers on the GPU path (labels reshard, gpumock; docs/spec/DESIGN.md §11): donors on the
# mock's GPUs in one layout, receivers on theirs in another, equal to a cpu storage load of the
# target layout; donors unchanged; the pairs' NCCL communicators made and released; a cuda/cpu mix
# refused and a failed NCCL connection failing every rank alike.
sl_gpumock_exe(test_gpu_peers_mock ${_sl_mock_dir}/test_gpu_peers.c SL_TEST_HAVE_CUDA=1 SL_TEST_CUDA_MOCK=1)
target_sources(test_gpu_peers_mock PRIVATE ${_sl_mock_dir}/gpu_ranks.c)
foreach(np 2 3 4 6)
  add_test(NAME test_gpu_peers_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_gpu_peers_mock>)
  set_tests_properties(test_gpu_peers_mock_np${np} PROPERTIES LABELS "reshard;gpumock" TIMEOUT 300
    PROCESSORS ${np} FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")
endforeach()

# Weight sync GPU to GPU on the mock (labels refit, gpumock): trainers' blocks in device memory, the
# receivers' parameters against the reference; the pairs' NCCL communicators made and released; F32 from
# device memory refused before any byte moves; a failed NCCL connection fails every rank, a retry works.
sl_gpumock_exe(test_gpu_refit_mock ${_sl_mock_dir}/test_gpu_refit.c SL_TEST_HAVE_CUDA=1 SL_TEST_CUDA_MOCK=1)
target_sources(test_gpu_refit_mock PRIVATE ${_sl_mock_dir}/gpu_ranks.c ${PROJECT_SOURCE_DIR}/tests/mpi/refit_common.c
  ${PROJECT_SOURCE_DIR}/tests/mpi/reshard_common.c ${PROJECT_SOURCE_DIR}/tests/common/reference.c
  ${PROJECT_SOURCE_DIR}/tests/mpi/load_check.c ${SL_REFERENCE_PARTS})
target_include_directories(test_gpu_refit_mock PRIVATE ${PROJECT_SOURCE_DIR}/tests/mpi)
foreach(np 3 4)
  add_test(NAME test_gpu_refit_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_gpu_refit_mock>)
  set_tests_properties(test_gpu_refit_mock_np${np} PROPERTIES LABELS "refit;gpumock" TIMEOUT 300
    PROCESSORS ${np} FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")
endforeach()

# `shardload reshard --device cuda` on the mock (labels reshard, gpumock): the receivers' saved copy
# equals a cpu storage load's, their report counts the pairs' NCCL communicators.
add_test(NAME test_cli_reshard_cuda_mock COMMAND bash ${_sl_mock_dir}/cli_mock_reshard.sh)
set_tests_properties(test_cli_reshard_cuda_mock PROPERTIES LABELS "reshard;gpumock" TIMEOUT 600 PROCESSORS 4
  FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV};${_sl_cli_mock_env}")

# Which CUDA runtime and NCCL the library opens (tests/gpu/cli_cuda_runtime.sh): the CUDA 12 stand-in
# under a 12.4 driver, the 13 one under a 13.0 driver, SHARDLOAD_CUDART and SHARDLOAD_NCCL.
if(TARGET cudart_mock12 AND TARGET cudart_mock13)
  add_test(NAME test_cli_cuda_runtime COMMAND bash ${_sl_mock_dir}/cli_cuda_runtime.sh)
  set_tests_properties(test_cli_cuda_runtime PROPERTIES LABELS gpumock TIMEOUT 300 PROCESSORS 2
    FIXTURES_REQUIRED models
    ENVIRONMENT "${SL_TEST_ENV};SL_CUDA_MOCK_DIR=${SL_CUDA_MOCK_DIR};SL_CUDA_MOCK12_DIR=${SL_CUDA_MOCK12_DIR}")
endif()

# A failure while the NCCL communicators are made or connected ends every rank promptly, with the
# default timeout_s (tests/gpu/test_gpu_comm_failure.c): the failing rank's creation or warm-up, the
# others told through the abort channel, one agreement naming the rank and NCCL's message.
sl_gpumock_exe(test_gpu_comm_failure_mock ${_sl_mock_dir}/test_gpu_comm_failure.c)
foreach(np 2 8)
  add_test(NAME test_gpu_comm_failure_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np}
    $<TARGET_FILE:test_gpu_comm_failure_mock>)
  set_tests_properties(test_gpu_comm_failure_mock_np${np} PROPERTIES LABELS gpumock TIMEOUT 120
    PROCESSORS ${np} FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}" SKIP_RETURN_CODE 77)
endforeach()

# Where the backend puts things (tests/gpu/test_gpu_placement.c): the groups' communicators split in
# layers from one parent sharing its resources, maxCTAs bounded, the device memory NCCL took in the
# report (one communicator's, or one per group with SHARDLOAD_NCCL_SHARE=0); bound buffers of another
# GPU or of the host refused before any byte moves.
sl_gpumock_exe(test_gpu_placement_mock ${_sl_mock_dir}/test_gpu_placement.c)
foreach(np 4 8)
  add_test(NAME test_gpu_placement_mock_np${np} COMMAND ${SL_MPIRUN} -np ${np} $<TARGET_FILE:test_gpu_placement_mock>)
  set_tests_properties(test_gpu_placement_mock_np${np} PROPERTIES LABELS gpumock TIMEOUT 180 PROCESSORS ${np}
    FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}" SKIP_RETURN_CODE 77)
endforeach()

# The stand-in's model of collectives issued in different orders on different ranks (a deadlock,
# caught by its watchdog): tests/gpu/test_nccl_order_mock.c.
sl_gpumock_exe(test_nccl_order_mock ${_sl_mock_dir}/test_nccl_order_mock.c)
add_test(NAME test_nccl_order_mock_np2 COMMAND ${SL_MPIRUN} -np 2 $<TARGET_FILE:test_nccl_order_mock>)
set_tests_properties(test_nccl_order_mock_np2 PROPERTIES LABELS gpumock TIMEOUT 60 PROCESSORS 2
  ENVIRONMENT "${SL_TEST_ENV}" SKIP_RETURN_CODE 77)
