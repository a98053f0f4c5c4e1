# tests/vllm/frontier_dsa.cmake — the vLLM plugin on DeepSeek-V3.2, GLM-5 and their MTP draft
# (DeepSeekMTP) at 1, 2 and 4 mp-executor workers against the stand-in's weight loaders
# (tests/vllm/test_vllm_dsa.py, cases in tests/vllm/cases_dsa.py; labels vllm;frontier).
foreach(n 1 2 4)
  add_test(NAME vllm_dsa_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_dsa.py ${n})
  set_tests_properties(vllm_dsa_w${n} PROPERTIES LABELS "vllm;frontier" TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

# One process: the plugin's fallback for a block-fp8 indexer (wk dequantized into wk_weights_proj).
add_test(NAME vllm_indexer_fp8 COMMAND timeout 110 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_indexer_fp8.py)
set_tests_properties(vllm_indexer_fp8 PROPERTIES LABELS "vllm;frontier" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${SL_VLLM_ENV}")
