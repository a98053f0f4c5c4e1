# Python package tests (label python): Debian's /usr/bin/python3 with python3-torch,
# python3-mpi4py, python3-numpy (skipped, code 77, without them). The multi-rank scripts run under
# scripts/mpirun-local, bounded by `timeout` and the test's TIMEOUT; the package is taken from
# python/ (PYTHONPATH) and the library from the build (SHARDLOAD_LIBRARY).
set(SL_PY /usr/bin/python3)
set(SL_PY_FIXTURES ${PROJECT_BINARY_DIR}/fixtures-python)
set(SL_PY_ENV ${SL_TEST_ENV}
  "PYTHONPATH=${PROJECT_SOURCE_DIR}/python"
  "SHARDLOAD_LIBRARY=$<TARGET_FILE:shardload>"
  "SL_PY_FIXTURES=${SL_PY_FIXTURES}"
  "OMPI_MCA_rmaps_base_oversubscribe=1")

# The numeric fixtures (F32 numbers) the forward tests need.
add_test(NAME python_fixtures COMMAND sh -c
  "${PROJECT_SOURCE_DIR}/scripts/make-fixture llama_f32 ${SL_PY_FIXTURES}/llama_f32 && ${PROJECT_SOURCE_DIR}/scripts/make-fixture mixtral_f32 ${SL_PY_FIXTURES}/mixtral_f32 && ${PROJECT_SOURCE_DIR}/scripts/make-fixture llama4_f32 ${SL_PY_FIXTURES}/llama4_f32")
set_tests_properties(python_fixtures PROPERTIES FIXTURES_SETUP python_models LABELS python TIMEOUT 120)

# sl_python_test(NAME SCRIPT NP...) — tests/python/SCRIPT under mpirun at each NP.
function(sl_python_test name script)
  foreach(np ${ARGN})
    add_test(NAME ${name}_np${np} COMMAND timeout 280 ${SL_MPIRUN} -np ${np} ${SL_PY}
      ${CMAKE_CURRENT_SOURCE_DIR}/python/${script})
    set_tests_properties(${name}_np${np} PROPERTIES LABELS python TIMEOUT 300 PROCESSORS ${np}
      FIXTURES_REQUIRED "models;python_models" ENVIRONMENT "${SL_PY_ENV}" SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

sl_python_test(python_load test_load.py 1 2 3 4)
sl_python_test(python_errors test_errors.py 1 2 3 4)
sl_python_test(python_no_mpi4py test_no_mpi4py.py 1 2 3 4)
sl_python_test(python_forward test_forward.py 1 2 4)
sl_python_test(python_rss test_rss.py 2)
sl_python_test(python_progress test_progress.py 1 2 3)
# Keys as vLLM spells them, did you mean, local paths against Hub ids, the heads first at tp 3.
sl_python_test(python_options test_options.py 1 2 3)

# pip install into a fresh venv, then a load at 2 ranks and an uncaught exception's abort under
# `python -m mpi4py`, in a clean environment outside the repository (the script says how).
add_test(NAME python_install COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python/test_install.sh)
set_tests_properties(python_install PROPERTIES LABELS python TIMEOUT 420 SKIP_RETURN_CODE 77 PROCESSORS 2
  FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}")

# The vLLM-style peer of scripts/bench against shardload's --save-sharded output, tp = 1, 2, 4.
# Nine interpreter starts with torch: a generous bound for a loaded machine.
add_test(NAME python_bench_peer COMMAND timeout 540 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_bench_peer.sh)
set_tests_properties(python_bench_peer PROPERTIES LABELS python TIMEOUT 600 PROCESSORS 4
  FIXTURES_REQUIRED models ENVIRONMENT "${SL_TEST_ENV}" SKIP_RETURN_CODE 77)

# scripts/bench's pause of free page reporting is always undone (stand-in kernel files).
add_test(NAME python_bench_page_reporting COMMAND ${SL_PY} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_bench_page_reporting.py)
set_tests_properties(python_bench_page_reporting PROPERTIES LABELS python TIMEOUT 60)

# Parameters bound to host tensors of another float dtype, against torch's own .to(dtype).
sl_python_test(python_cast test_cast.py 1 2 4)

# The package's check of the library it opens (version, ctypes layouts, SL_MAX_DIMS): passes on
# the build's library, names every difference of a simulated mismatch. One process, no MPI job.
add_test(NAME python_abi COMMAND ${SL_PY} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_abi.py)
set_tests_properties(python_abi PROPERTIES LABELS python TIMEOUT 60 ENVIRONMENT "${SL_PY_ENV}")

# Reload in place over MPI (Loader.reload; labels reshard and python): tensors exported before see
# the new values at the same addresses, refusals change nothing (tests/python/reload_check.py).
sl_python_test(python_reload test_reload.py 1 2 3 4)
foreach(np 1 2 3 4)
  set_tests_properties(python_reload_np${np} PROPERTIES LABELS "reshard;python")
endforeach()

# Load from peers over MPI (Loader.load_from_peers; labels reshard and python): 2 donors give 2
# receivers another layout; the receivers equal the reference and read nothing, the donors unchanged.
sl_python_test(python_load_from_peers test_load_from_peers.py 4)
set_tests_properties(python_load_from_peers_np4 PROPERTIES LABELS "reshard;python")
# Pack-quantized and NVFP4 fixtures through shardload.Loader against vLLM's rules in numpy (compressed-
# tensors NVFP4 dense linears, W4A16 experts in the Marlin layout).
sl_python_test(python_load_packed test_load_packed.py 1 2 4)
foreach(np 1 2 4)
  set_tests_properties(python_load_packed_np${np} PROPERTIES LABELS "python;frontier")
endforeach()

# Weight sync from Python over MPI (labels python, refit): shardload.publish on 2 trainers, Loader.refit
# on 2 receivers, against common.reference over the versions' weights as torch rounds them.
sl_python_test(python_refit test_refit.py 4)
set_tests_properties(python_refit_np4 PROPERTIES LABELS "python;refit")

# Caller-described plans from Python (labels python, recorded): shardload.Plan, Loader(plan=),
# load_into(plan=), the JSON form, shardload.dryrun(plans=), a refusal on every rank.
sl_python_test(python_plan test_plan.py 1 2)
foreach(np 1 2)
  set_tests_properties(python_plan_np${np} PROPERTIES LABELS "python;recorded")
endforeach()
