# tests/fuzz/fuzz.cmake — libFuzzer targets, one per parser of untrusted input, built with clang
# apart from the gcc build:
#   fuzz_header        safetensors headers (format/safetensors.c)
#   fuzz_expr          the expression language of spec files (model/expr.c)
#   fuzz_spec          architecture spec files (model/spec.c)
#   fuzz_config        config.json, instantiated against a fixture's catalog (model/model.c)
#   fuzz_index         weight index files (model/file_select.c)
#   fuzz_extra_config  vLLM's --extra-config JSON (api/extra_config.c)
#   fuzz_options       configuration values (api/config.c, api/options.c)
#   fuzz_catalog_blob  the catalog blob rank 0 broadcasts (model/catalog.c)
#   fuzz_pickle        the state-dict pickle of torch.save files (format/pickle.c)
#   fuzz_zip           torch.save zip archives: directory and whole checkpoint (format/zip.c)
#   fuzz_cpulist       sysfs CPU lists, numa_node files and PCI bus ids (base/numa.c)
#   fuzz_s3_ini        AWS's shared credentials and config files (s3/ini.c)
#   fuzz_s3_xml        S3's ListObjectsV2 pages and error documents (s3/xml.c; with the S3 client)
#   fuzz_plan_json     caller-described plans: the JSON form and the blob ranks exchange (model/described*.c)
#   fuzz_quant_ignore  ignore lists of pack-quantized / NVFP4 configs (model/quant_ignore.c)
#   fuzz_refit         weight sync: the blocks trainers publish, the dry run's publishers (plan/refit_*.c)
# The library is compiled once with clang and the fuzzer's instrumentation into libsl_fuzz.a
# (tests/fuzz/build-lib.sh); each target links it. A ctest test per target runs it briefly on a
# copy of its seed corpus tests/fuzz/corpus/<name> (libFuzzer adds finds to the first corpus
# folder; the copy keeps the tree clean); crash inputs are kept in the build tree as
# tests/fuzz_<name>-crash-*. scripts/fuzz runs them longer. Without clang and its libFuzzer
# runtime (or with SL_FUZZ=OFF) nothing here is registered.

set(_sl_fuzz_dir ${CMAKE_CURRENT_LIST_DIR})
set(SL_FUZZ_TARGETS header expr spec config index extra_config options catalog_blob pickle zip)
list(APPEND SL_FUZZ_TARGETS hub_json) # Hub revision API replies and trees/<commit>.json (hub/hub.c, hub/offline.c)
list(APPEND SL_FUZZ_TARGETS hub_ref) # refs files of the Hub cache (hub/cache.c)
list(APPEND SL_FUZZ_TARGETS cpulist) # what the CUDA backend reads of sysfs to place its readers (base/numa.c)
list(APPEND SL_FUZZ_TARGETS s3_ini) # AWS's shared credentials and config files (s3/ini.c)
list(APPEND SL_FUZZ_TARGETS plan_json) # caller-described plans, JSON and blob (model/described*.c)
list(APPEND SL_FUZZ_TARGETS quant_ignore) # ignore lists of pack-quantized / NVFP4 configs (model/quant_ignore.c)
list(APPEND SL_FUZZ_TARGETS refit) # weight sync: published blocks between ranks, the dry run's publishers (plan/refit_*.c)
if(SL_HAVE_S3)
  list(APPEND SL_FUZZ_TARGETS s3_xml) # S3's ListObjectsV2 pages and error documents (s3/xml.c, expat)
endif()
# Seconds each target runs in the suite: long enough to get past the seeds, short enough for CI.
set(SL_FUZZ_SECONDS 10 CACHE STRING "Seconds each fuzz target runs under ctest (a smoke run: scripts/fuzz --minutes N fuzzes longer)")
find_program(SL_CLANG NAMES clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14)

set(_sl_fuzz_ok OFF)
if(NOT SL_FUZZ)
  message(STATUS "shardload: SL_FUZZ is OFF: fuzz targets not built")
elseif(NOT SL_CLANG)
  message(STATUS "shardload: clang not found: fuzz targets not built (install clang to fuzz the parsers)")
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
    message(STATUS "shardload: ${SL_CLANG} cannot link -fsanitize=fuzzer: fuzz targets not built")
  endif()
endif()

if(_sl_fuzz_ok)
  # The library's sources as the main build chooses them, without the optional backends (no
  # CUDA, no io_uring: their stand-ins in src/absent answer instead) and without the tool.
  file(GLOB_RECURSE _sl_fuzz_lib_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.c)
  list(FILTER _sl_fuzz_lib_sources EXCLUDE REGEX "/src/(cli|backend/cuda|engine/uring)/")
  if(SL_HUB)
    list(FILTER _sl_fuzz_lib_sources EXCLUDE REGEX "/src/absent/hub\\.c$")
  else()
    list(FILTER _sl_fuzz_lib_sources EXCLUDE REGEX "/src/hub/")
    list(APPEND _sl_fuzz_lib_sources ${PROJECT_SOURCE_DIR}/src/hub/opts.c ${PROJECT_SOURCE_DIR}/src/hub/env.c)
  endif()
  if(SL_HAVE_S3)
    list(FILTER _sl_fuzz_lib_sources EXCLUDE REGEX "/src/absent/s3\\.c$")
  else()
    list(FILTER _sl_fuzz_lib_sources EXCLUDE REGEX "/src/s3/")
    list(APPEND _sl_fuzz_lib_sources ${SL_S3_ALWAYS})
  endif()
  file(GLOB_RECURSE _sl_fuzz_lib_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.h)
  set(_sl_fuzz_cflags -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
      -std=c11 -D_GNU_SOURCE -I${PROJECT_SOURCE_DIR}/include -I${SL_GENERATED_INCLUDE_DIR} -I${PROJECT_SOURCE_DIR}/src)
  foreach(dir ${MPI_C_INCLUDE_DIRS} ${CJSON_INCLUDE_DIRS})
    list(APPEND _sl_fuzz_cflags -I${dir})
  endforeach()
  set(_sl_fuzz_lib ${CMAKE_CURRENT_BINARY_DIR}/libsl_fuzz.a)
  add_custom_command(OUTPUT ${_sl_fuzz_lib}
    COMMAND ${_sl_fuzz_dir}/build-lib.sh ${SL_CLANG} ${_sl_fuzz_lib} ${_sl_fuzz_cflags} -- ${_sl_fuzz_lib_sources}
    DEPENDS ${_sl_fuzz_lib_sources} ${_sl_fuzz_lib_headers} ${PROJECT_SOURCE_DIR}/include/shardload/shardload.h
            ${_sl_fuzz_dir}/build-lib.sh
    COMMENT "Building the library with ${SL_CLANG} for the fuzz targets"
    VERBATIM)
  set(_sl_fuzz_libs ${MPI_C_LIBRARIES} ${CJSON_LINK_LIBRARIES} -lpthread -lm)
  if(SL_HUB)
    list(APPEND _sl_fuzz_libs ${CURL_LINK_LIBRARIES} ${LIBCRYPTO_LINK_LIBRARIES})
  endif()
  if(SL_HAVE_S3)
    list(APPEND _sl_fuzz_libs ${CURL_LINK_LIBRARIES} ${EXPAT_LINK_LIBRARIES})
  endif()
  set(_sl_fuzz_bins "")
  foreach(name ${SL_FUZZ_TARGETS})
    set(_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_${name})
    add_custom_command(OUTPUT ${_bin}
      COMMAND ${SL_CLANG} ${_sl_fuzz_cflags} -fsanitize=fuzzer -I${_sl_fuzz_dir} ${_sl_fuzz_dir}/fuzz_${name}.c
              ${_sl_fuzz_lib} ${_sl_fuzz_libs} -o ${_bin}
      DEPENDS ${_sl_fuzz_dir}/fuzz_${name}.c ${_sl_fuzz_dir}/fuzz_common.h ${_sl_fuzz_lib}
      COMMENT "Linking the fuzz target fuzz_${name}"
      VERBATIM)
    list(APPEND _sl_fuzz_bins ${_bin})
    add_test(NAME fuzz_${name}
      COMMAND sh -c "d=$(mktemp -d) || exit 1; cp \"$2\"/* \"$d\"/ && \"$1\" -max_total_time=$4 -timeout=10 -rss_limit_mb=2048 -artifact_prefix=\"$3\" \"$d\"; rc=$?; rm -rf \"$d\"; exit $rc"
              sh ${_bin} ${_sl_fuzz_dir}/corpus/${name} ${CMAKE_CURRENT_BINARY_DIR}/fuzz_${name}- ${SL_FUZZ_SECONDS})
    set_tests_properties(fuzz_${name} PROPERTIES LABELS "unit;fuzz" TIMEOUT 180
      ENVIRONMENT "${SL_TEST_ENV}")
  endforeach()
  set_tests_properties(fuzz_config PROPERTIES FIXTURES_REQUIRED models)
  add_custom_target(fuzz_targets ALL DEPENDS ${_sl_fuzz_bins})
endif()
