# Loads over a torch.distributed process group (label workers): worker processes started by
# torch.multiprocessing and joined by gloo, no mpirun and no MPI. Debian's /usr/bin/python3 with
# python3-torch and python3-numpy (skipped, code 77, without them); environment as the python
# label's (SL_PY_ENV: the package from python/, the library from the build, the fixtures). Each
# script bounds itself below its TIMEOUT and kills its workers on the way out; `timeout` is the
# last resort (its SIGTERM still runs the scripts' clean-up).
set(SL_WORKERS_FIXTURES ${PROJECT_BINARY_DIR}/fixtures-workers)
set(SL_WORKERS_ENV ${SL_PY_ENV} "SL_WORKERS_FIXTURES=${SL_WORKERS_FIXTURES}")

# Variations of the fixture models only these tests load (make_fixtures.sh says which).
add_test(NAME workers_fixtures COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/workers/make_fixtures.sh
  ${SL_WORKERS_FIXTURES})
set_tests_properties(workers_fixtures PROPERTIES FIXTURES_SETUP workers_models LABELS workers
  TIMEOUT 120 ENVIRONMENT "${SL_TEST_ENV}")

# sl_workers_test(NAME SCRIPT TIMEOUT NP ARG...) — tests/workers/SCRIPT ARG... with NP workers.
function(sl_workers_test name script timeout np)
  add_test(NAME ${name} COMMAND timeout ${timeout} ${SL_PY}
    ${CMAKE_CURRENT_SOURCE_DIR}/workers/${script} ${ARGN})
  math(EXPR ctest_timeout "${timeout} + 30")
  set_tests_properties(${name} PROPERTIES LABELS workers TIMEOUT ${ctest_timeout} PROCESSORS ${np}
    FIXTURES_REQUIRED "models;python_models;workers_models" ENVIRONMENT "${SL_WORKERS_ENV}"
    SKIP_RETURN_CODE 77)
endfunction()

# Byte-exact against the tests' own reference: tp, tp x dp, pp, experts with and without EP, MLA.
foreach(np 1 2 3 4)
  sl_workers_test(workers_load_np${np} test_workers_load.py 480 ${np} ${np})
endforeach()
# The shards' forward pass equals the unsharded model's (llama_f32; mixtral_f32 with, without EP).
foreach(np 2 4)
  sl_workers_test(workers_forward_np${np} test_workers_forward.py 360 ${np} ${np})
endforeach()
# A worker killed, stopped, or raising before load(): the others raise in time, naming it (peer_rank);
# kill_exit: the survivors' processes end as soon as they raised (rank 0's hosts the store).
foreach(fault kill kill_exit stop raise_exit raise_stay)
  sl_workers_test(workers_fault_${fault} test_workers_fault.py 240 3 ${fault})
endforeach()
# Reload in place over the group (labels reshard and workers): tests/python/reload_check.py.
foreach(np 1 2 4)
  sl_workers_test(workers_reload_np${np} test_workers_reload.py 240 ${np} ${np})
  set_tests_properties(workers_reload_np${np} PROPERTIES LABELS "reshard;workers")
endforeach()
# Load from peers over the group (labels reshard and workers): 2 donors at tp 2, 2 receivers at tp 1 dp 2.
sl_workers_test(workers_load_from_peers_np4 test_workers_load_from_peers.py 240 4)
set_tests_properties(workers_load_from_peers_np4 PROPERTIES LABELS "reshard;workers")
# Weight sync over the group (labels refit and workers): 2 trainers, 2 receivers at tp 2; versions and
# a repeat; a trainer failing mid-update (every worker raises, the states, the next refit completes
# it); a trainer, then a receiver, killed mid-update (the others raise in time, the receivers stay usable).
foreach(case steps raise kill kill_receiver)
  sl_workers_test(workers_refit_${case} test_workers_refit.py 240 4 ${case})
  set_tests_properties(workers_refit_${case} PROPERTIES LABELS "refit;workers")
endforeach()
