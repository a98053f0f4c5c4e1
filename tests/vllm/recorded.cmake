# Plans recorded from vLLM's own weight loaders (labels recorded and vllm): the recorder in one
# process (every view op, every fallback, the stand-in's models at every rank of tp 1/2/4, pp 2
# and expert parallelism, against vLLM's rules over the whole checkpoint).
add_test(NAME vllm_record COMMAND timeout 170 ${SL_PY} ${SL_VLLM_DIR}/test_record.py)
set_tests_properties(vllm_record PROPERTIES LABELS "vllm;recorded" TIMEOUT 180 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")

# The plugin through recorded plans (harness group recorded, tests/vllm/recorded_cases.py): mp
# executor at 1, 2 and 4 workers; external_launcher under mpirun at 2.
foreach(n 1 2 4)
  add_test(NAME vllm_recorded_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mp.py ${n} recorded)
  set_tests_properties(vllm_recorded_w${n} PROPERTIES LABELS "vllm;recorded" TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()
add_test(NAME vllm_recorded_mpirun_np2 COMMAND timeout 280 ${SL_MPIRUN} -np 2
  ${PROJECT_SOURCE_DIR}/launch/vllm-mpirun.sh ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mpirun.py recorded)
set_tests_properties(vllm_recorded_mpirun_np2 PROPERTIES LABELS "vllm;recorded" TIMEOUT 300 PROCESSORS 2
  SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
