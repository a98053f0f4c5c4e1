# tests/vllm/frontier_minimax.cmake — the vLLM plugin on MiniMax-M2 at 1, 2 and 4 mp-executor workers
# against the stand-in's weight loaders (tests/vllm/test_vllm_minimax.py, cases in
# tests/vllm/cases_minimax.py; labels vllm;frontier).
foreach(n 1 2 4)
  add_test(NAME vllm_minimax_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_minimax.py ${n})
  set_tests_properties(vllm_minimax_w${n} PROPERTIES LABELS "vllm;frontier" TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()
