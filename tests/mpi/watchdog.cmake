# The load watchdog (tests/mpi/test_watchdog.sh): a rank killed (SIGKILL) or stopped (SIGSTOP)
# mid-load, at odd and even world sizes; every other rank must name the phase and the rank, and
# the job must end within timeout_s + 10 s. Label mpi.
foreach(_wd kill:2:3 stop:1:3 kill:0:2 stop:3:4)
  string(REPLACE ":" ";" _wd_args ${_wd})
  list(GET _wd_args 0 _wd_fault)
  list(GET _wd_args 1 _wd_victim)
  list(GET _wd_args 2 _wd_np)
  set(_wd_name test_watchdog_${_wd_fault}_rank${_wd_victim}_np${_wd_np})
  add_test(NAME ${_wd_name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/test_watchdog.sh ${_wd_fault} ${_wd_victim}
    ${_wd_np})
  set_tests_properties(${_wd_name} PROPERTIES LABELS mpi TIMEOUT 120 FIXTURES_REQUIRED models
    ENVIRONMENT "${SL_TEST_ENV}" PROCESSORS ${_wd_np})
endforeach()
