# tests/vllm/frontier_dsv4.cmake — the vLLM plugin on DeepSeek-V4 at 1, 2 and 4 mp-executor workers
# against the stand-in's weight loaders (tests/vllm/test_vllm_dsv4.py, cases in tests/vllm/cases_dsv4.py;
# labels vllm;frontier).
foreach(n 1 2 4)
  add_test(NAME vllm_dsv4_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_dsv4.py ${n})
  set_tests_properties(vllm_dsv4_w${n} PROPERTIES LABELS "vllm;frontier" TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()
