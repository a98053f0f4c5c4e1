# tests/fuzz/fuzz.cmake — the libFuzzer target fuzz_header (safetensors header scanner), built
# with clang apart from the gcc build, and the ctest fuzz_header that runs it for 60 s on a copy of
# tests/fuzz/corpus (libFuzzer adds its finds to the first corpus directory; the copy keeps the
# tree clean). Crash inputs are kept in the build tree as tests/fuzz_header-crash-*. Without clang
# and its libFuzzer runtime (or with SL_FUZZ=OFF) the test is not registered.

set(_sl_fuzz_dir ${CMAKE_CURRENT_LIST_DIR})
set(_sl_fuzz_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_header)
find_program(SL_CLANG NAMES clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14)

set(_sl_fuzz_ok OFF)
if(NOT SL_FUZZ)
  message(STATUS "shardload: SL_FUZZ is OFF: fuzz_header not built")
elseif(NOT SL_CLANG)
  message(STATUS "shardload: clang not found: fuzz_header not built (install clang to fuzz the header scanner)")
else()
  # Probe once: clang may lack the libFuzzer runtime.
  set(_sl_probe_src ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe.c)
  file(WRITE ${_sl_probe_src}
    "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
  execute_process(COMMAND ${SL_CLANG} -fsanitize=fuzzer,address,undefined ${_sl_probe_src}
                          -o ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe
                  RESULT_VARIABLE _sl_probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(_sl_probe_rc EQUAL 0)
    set(_sl_fuzz_ok ON)
  else()
    message(STATUS "shardload: ${SL_CLANG} cannot link -fsanitize=fuzzer: fuzz_header not built")
  endif()
endif()

if(_sl_fuzz_ok)
  set(_sl_fuzz_sources
    ${_sl_fuzz_dir}/fuzz_header.c
    ${PROJECT_SOURCE_DIR}/src/format/safetensors.c
    ${PROJECT_SOURCE_DIR}/src/format/safetensors_write.c
    ${PROJECT_SOURCE_DIR}/src/base/err.c
    ${PROJECT_SOURCE_DIR}/src/base/util.c
    ${PROJECT_SOURCE_DIR}/src/format/dtype.c
    ${PROJECT_SOURCE_DIR}/src/api/status.c)
  set(_sl_fuzz_includes -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/src)
  foreach(dir ${MPI_C_INCLUDE_DIRS})
    list(APPEND _sl_fuzz_includes -I${dir})
  endforeach()
  add_custom_command(OUTPUT ${_sl_fuzz_bin}
    COMMAND ${SL_CLANG} -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11
            -D_GNU_SOURCE ${_sl_fuzz_includes} ${_sl_fuzz_sources} -o ${_sl_fuzz_bin}
    DEPENDS ${_sl_fuzz_sources} ${PROJECT_SOURCE_DIR}/src/format/safetensors.h ${PROJECT_SOURCE_DIR}/src/base/util.h
            ${PROJECT_SOURCE_DIR}/src/base/err.h ${PROJECT_SOURCE_DIR}/src/format/dtype.h
            ${PROJECT_SOURCE_DIR}/include/shardload/shardload.h
    COMMENT "Building the libFuzzer target fuzz_header with ${SL_CLANG}"
    VERBATIM)
  add_custom_target(fuzz_header_build ALL DEPENDS ${_sl_fuzz_bin})
  add_test(NAME fuzz_header
    COMMAND sh -c "d=$(mktemp -d) || exit 1; cp \"$2\"/* \"$d\"/ && \"$1\" -max_total_time=60 -timeout=10 -artifact_prefix=\"$3\" \"$d\"; rc=$?; rm -rf \"$d\"; exit $rc"
            sh ${_sl_fuzz_bin} ${_sl_fuzz_dir}/corpus ${CMAKE_CURRENT_BINARY_DIR}/fuzz_header-)
  set_tests_properties(fuzz_header PROPERTIES LABELS unit TIMEOUT 120)
endif()
