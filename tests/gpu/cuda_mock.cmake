# tests/gpu/cuda_mock.cmake — the CPU stand-in of the CUDA runtime and NCCL (cuda_mock*.c) built as
# the libraries it stands in for, so that libshardload finds it at run time as it finds the real ones
# (LD_LIBRARY_PATH, or already loaded by a program linked with it):
#   ${SL_CUDA_MOCK_DIR}/libcudart.so.<major> and libnccl.so.2      the toolkit's CUDA major (13 here)
#   ${SL_CUDA_MOCK12_DIR}/libcudart.so.12 and libnccl.so.2         a CUDA 12.4 runtime (without
#                                                                  cudaGetDriverEntryPointByVersion)
# The runtime's symbols carry the version node libcudart.so.<major>, as NVIDIA's do. Each libnccl is
# linked with the runtime of its folder (they share the mock's device thread). shardload_gpumock is
# libshardload (static) with the CUDA-major stand-in linked: the test programs that call the mock
# (mock_stats, mock_nccl_count) or the runtime (cudaMemcpy back) link it.
if(NOT SL_HAVE_CUDA)
  return()
endif()
set(_sl_mock_dir ${CMAKE_CURRENT_LIST_DIR})
set(SL_CUDA_MOCK_DIR ${PROJECT_BINARY_DIR}/cuda-mock)
set(SL_CUDA_MOCK12_DIR ${PROJECT_BINARY_DIR}/cuda-mock-12)

# sl_cuda_mock_libs(MAJOR DIR) — targets cudart_mockMAJOR and nccl_mockMAJOR in DIR.
function(sl_cuda_mock_libs major dir)
  set(map ${CMAKE_CURRENT_BINARY_DIR}/cudart_mock${major}.map)
  file(WRITE ${map} "libcudart.so.${major} { global: *; };\n")
  add_library(cudart_mock${major} SHARED ${_sl_mock_dir}/cuda_mock.c ${_sl_mock_dir}/cuda_mock_stream.c)
  set_target_properties(cudart_mock${major} PROPERTIES OUTPUT_NAME cudart SOVERSION ${major}
    LIBRARY_OUTPUT_DIRECTORY ${dir} LINK_DEPENDS ${map})
  target_link_options(cudart_mock${major} PRIVATE -Wl,--version-script=${map})
  add_library(nccl_mock${major} SHARED ${_sl_mock_dir}/cuda_mock_nccl.c)
  set_target_properties(nccl_mock${major} PROPERTIES OUTPUT_NAME nccl SOVERSION 2 LIBRARY_OUTPUT_DIRECTORY ${dir})
  target_link_libraries(nccl_mock${major} PRIVATE cudart_mock${major})
  foreach(t cudart_mock${major} nccl_mock${major})
    target_include_directories(${t} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
    target_compile_options(${t} PRIVATE ${SL_WARNINGS})
    target_compile_definitions(${t} PRIVATE _GNU_SOURCE MOCK_CUDART_MAJOR=${major})
    target_link_libraries(${t} PRIVATE Threads::Threads m)
  endforeach()
endfunction()

sl_cuda_mock_libs(${CUDAToolkit_VERSION_MAJOR} ${SL_CUDA_MOCK_DIR})
set(SL_CUDA_MOCK_RUNTIME cudart_mock${CUDAToolkit_VERSION_MAJOR})
set(SL_CUDA_MOCK_NCCL nccl_mock${CUDAToolkit_VERSION_MAJOR})
if(NOT CUDAToolkit_VERSION_MAJOR EQUAL 12)
  sl_cuda_mock_libs(12 ${SL_CUDA_MOCK12_DIR})
endif()

add_library(shardload_gpumock INTERFACE)
target_link_libraries(shardload_gpumock INTERFACE shardload_static ${SL_CUDA_MOCK_RUNTIME} ${SL_CUDA_MOCK_NCCL})
target_include_directories(shardload_gpumock SYSTEM INTERFACE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
target_include_directories(shardload_gpumock INTERFACE ${PROJECT_SOURCE_DIR}/src ${_sl_mock_dir})

# MPI_Init noting the CUDA context current when MPI starts (LD_PRELOAD into the CLI, cli_mock_load.sh).
add_library(mpi_init_probe SHARED ${_sl_mock_dir}/mpi_init_probe.c)
set_target_properties(mpi_init_probe PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${SL_CUDA_MOCK_DIR})
target_include_directories(mpi_init_probe SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
target_compile_options(mpi_init_probe PRIVATE ${SL_WARNINGS})
target_link_libraries(mpi_init_probe PRIVATE MPI::MPI_C ${SL_CUDA_MOCK_RUNTIME})
