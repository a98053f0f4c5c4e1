# Qwen3-Next and Qwen3.5 through the Python package (labels python, frontier): byte-exact loads and
# load_into against an independent numpy reference of vLLM's rules, and forward passes of a tiny
# gated DeltaNet + MoE decoder, sharded against unsharded (tests/python/test_qwen_next.py).
add_test(NAME python_qwen_fixtures COMMAND sh -c
  "${PROJECT_SOURCE_DIR}/scripts/make-fixture qwen3_next_f32 ${SL_PY_FIXTURES}/qwen3_next_f32 && ${PROJECT_SOURCE_DIR}/scripts/make-fixture qwen3_5_moe_f32 ${SL_PY_FIXTURES}/qwen3_5_moe_f32")
set_tests_properties(python_qwen_fixtures PROPERTIES FIXTURES_SETUP python_qwen_models LABELS "python;frontier"
  TIMEOUT 120)
foreach(np 1 2 4)
  add_test(NAME python_qwen_next_np${np} COMMAND timeout 280 ${SL_MPIRUN} -np ${np} ${SL_PY}
    ${CMAKE_CURRENT_SOURCE_DIR}/python/test_qwen_next.py)
  set_tests_properties(python_qwen_next_np${np} PROPERTIES LABELS "python;frontier" TIMEOUT 300 PROCESSORS ${np}
    FIXTURES_REQUIRED "models;python_qwen_models" ENVIRONMENT "${SL_PY_ENV}" SKIP_RETURN_CODE 77)
endforeach()
