# Plans recorded from vLLM's own weight loaders (labels recorded and vllm): the recorder in one
# process (every view op, every fallback, the stand-in's models at every rank of tp 1/2/4, pp 2
# and expert parallelism, against vLLM's rules over the whole checkpoint).
add_test(NAME vllm_record COMMAND timeout 170 ${SL_PY} ${SL_VLLM_DIR}/test_record.py)
set_tests_properties(vllm_record PROPERTIES LABELS "vllm;recorded" TIMEOUT 180 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
