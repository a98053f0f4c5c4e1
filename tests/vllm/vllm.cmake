# vLLM plugin tests (label vllm): python/shardload/vllm.py driven through a stand-in of vLLM's
# public surface (tests/vllm/standin/vllm: vLLM cannot be installed here), run with Debian's
# /usr/bin/python3 (torch, numpy, mpi4py; skipped, code 77, without them). Workers are started
# as vLLM's mp executor starts them (test_vllm_mp.py: spawn + gloo over tcp) and as its
# external_launcher under mpirun (test_vllm_mpirun.py through launch/vllm-mpirun.sh); every
# parameter is compared with what vLLM's weight_loader rules give from the whole checkpoint.
set(SL_VLLM_FIXTURES ${PROJECT_BINARY_DIR}/fixtures-vllm)
set(SL_VLLM_ENV ${SL_PY_ENV} "SL_VLLM_FIXTURES=${SL_VLLM_FIXTURES}")
set(SL_VLLM_DIR ${CMAKE_CURRENT_SOURCE_DIR}/vllm)

add_test(NAME vllm_fixtures COMMAND ${SL_PY} ${SL_VLLM_DIR}/make_fixtures.py ${SL_VLLM_FIXTURES})
set_tests_properties(vllm_fixtures PROPERTIES FIXTURES_SETUP vllm_models LABELS vllm TIMEOUT 120
  ENVIRONMENT "${SL_TEST_ENV}")

# One process: registration (entry point, never raising), options, expert-map and draft rules.
add_test(NAME vllm_plugin COMMAND timeout 110 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_plugin.py)
set_tests_properties(vllm_plugin PROPERTIES LABELS vllm TIMEOUT 120 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")

# mp executor (vllm serve): 1-4 workers; dtype: a model dtype other than the checkpoint's.
foreach(n 1 2 3 4)
  add_test(NAME vllm_mp_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mp.py ${n})
  set_tests_properties(vllm_mp_w${n} PROPERTIES LABELS vllm TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()
foreach(n 1 2)
  add_test(NAME vllm_dtype_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mp.py ${n} dtype)
  set_tests_properties(vllm_dtype_w${n} PROPERTIES LABELS vllm TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

# Qwen3-Next and Qwen3.5 (gated DeltaNet, the ConditionalGeneration wrappers): 1 and 2 workers.
foreach(n 1 2)
  add_test(NAME vllm_qwen_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mp.py ${n} qwen)
  set_tests_properties(vllm_qwen_w${n} PROPERTIES LABELS "vllm;frontier" TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

# The multimodal wrappers with their vision towers (Qwen3-VL, Gemma-3): 1, 2 and 4 workers.
foreach(n 1 2 4)
  add_test(NAME vllm_mm_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mp.py ${n} mm)
  set_tests_properties(vllm_mm_w${n} PROPERTIES LABELS "vllm;frontier" TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

# external_launcher under mpirun.
foreach(np 1 2 4)
  add_test(NAME vllm_mpirun_np${np} COMMAND timeout 280 ${SL_MPIRUN} -np ${np}
    ${PROJECT_SOURCE_DIR}/launch/vllm-mpirun.sh ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mpirun.py)
  set_tests_properties(vllm_mpirun_np${np} PROPERTIES LABELS vllm TIMEOUT 300 PROCESSORS ${np}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

# shardload.torch.load_into's rules for vLLM-built modules (ties, scales, copies, fallback, check),
# over MPI.
foreach(np 1 2)
  add_test(NAME vllm_load_into_np${np} COMMAND timeout 200 ${SL_MPIRUN} -np ${np} ${SL_PY}
    ${SL_VLLM_DIR}/test_load_into.py)
  set_tests_properties(vllm_load_into_np${np} PROPERTIES LABELS vllm TIMEOUT 220 PROCESSORS ${np}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

# Pack-quantized (compressed-tensors W4A16 / W8A16) and NVFP4 (compressed-tensors, ModelOpt)
# checkpoints: the stand-in's quantized linear and FusedMoE parameters (labels vllm;frontier).
foreach(n 1 2)
  add_test(NAME vllm_packed_w${n} COMMAND timeout 280 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_mp.py ${n} packed)
  set_tests_properties(vllm_packed_w${n} PROPERTIES LABELS "vllm;frontier" TIMEOUT 300 PROCESSORS ${n}
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

# The 2026 families (labels vllm;frontier): DeepSeek-V3.2, GLM-5 and their MTP draft; MiniMax-M2;
# DeepSeek-V4.
include(${CMAKE_CURRENT_LIST_DIR}/frontier_dsa.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/frontier_minimax.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/frontier_dsv4.cmake)

# Weight sync into a running engine through shardload.vllm.RefitWorkerExtension (labels vllm, refit):
# 2 workers of the stand-in's mp executor and 2 trainer processes over a sync group; versions, a
# repeat, a refusal, each version against the stand-in's default load of that version's weights.
foreach(case llama mixtral)
  add_test(NAME vllm_refit_${case} COMMAND timeout 200 ${SL_PY} ${SL_VLLM_DIR}/test_vllm_refit.py ${case})
  set_tests_properties(vllm_refit_${case} PROPERTIES LABELS "vllm;refit" TIMEOUT 220 PROCESSORS 4
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED vllm_models ENVIRONMENT "${SL_VLLM_ENV}")
endforeach()

include(${SL_VLLM_DIR}/recorded.cmake)  # plans recorded from the weight loaders (label recorded)
