# Pure layout and planning tests (no MPI).
sl_unit_test(test_layout)
sl_unit_test(test_plan)
sl_unit_test(test_dryrun)
set_tests_properties(test_dryrun PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
sl_unit_test(test_model)
# A multimodal wrapper's spec keys: a vision spec by name or inline, broadcast text, clear errors.
sl_unit_test(test_spec_vision)
sl_unit_test(test_readplan)
# Two dry runs on two threads at once give the result of one alone (the planner is reentrant).
sl_unit_test(test_plan_threads)
# `shardload plan --json` of a set of layouts equals the planner's output recorded before the work
# on its speed, field by field (tests/data/plan_golden).
sl_script_test(test_plan_golden unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan_golden.py)
set_tests_properties(test_plan_golden PROPERTIES TIMEOUT 300)
# A loading rank's schedule is its part of the whole schedule (plan/plan.h sl__plan_opts.local).
sl_unit_test(test_local_plan)
set_tests_properties(test_local_plan PROPERTIES TIMEOUT 300)
# The schedule when some ranks cannot open some files: readers among the ranks that see them.
sl_unit_test(test_plan_visibility)
# The real Qwen3-Next-80B and Qwen3.5-397B layouts (header-only) at tp 8 x pp 2 and tp 8 x dp 2 with
# expert parallelism: every byte read once, every rank's bytes those of its slices (labels unit,
# frontier).
sl_script_test(test_plan_qwen_next unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan_qwen_next.py)
set_tests_properties(test_plan_qwen_next PROPERTIES TIMEOUT 120 LABELS "unit;frontier")
# The full-size Kimi-K2-Thinking (W4A16 experts) planned at tp 8 x pp 2 with expert parallelism,
# headers only: every byte read once, each rank's bytes those of the reference (labels unit;frontier).
sl_unit_test(test_plan_kimi)
target_sources(test_plan_kimi PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/common/reference.c)
set_tests_properties(test_plan_kimi PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "unit;frontier")
# The ignore lists of pack-quantized / NVFP4 configs match as vLLM's Python does (labels unit;frontier).
sl_unit_test(test_quant_ignore)
set_tests_properties(test_quant_ignore PROPERTIES LABELS "unit;frontier")
# The real Qwen3-VL-235B-A22B layout (header-only) with its vision tower and with skip_vision at tp 8 x
# pp 2 and tp 8 x dp 2 with expert parallelism: every byte read once, every rank's bytes those of its
# slices, the tower on every stage (labels unit, frontier).
sl_script_test(test_plan_multimodal unit ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan_multimodal.py)
set_tests_properties(test_plan_multimodal PROPERTIES TIMEOUT 120 LABELS "unit;frontier")
