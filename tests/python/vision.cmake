# The multimodal wrappers through the Python package (labels python, frontier): qwen3_vl and gemma3_mm
# loaded at tp 1, 2, 4 with their vision towers and with skip_vision, every byte against an
# independent numpy reference of vLLM's rules (tests/python/test_multimodal.py). Included after
# python.cmake (the files of tests/python/ are included in name order).
foreach(np 1 2 4)
  add_test(NAME python_multimodal_np${np} COMMAND timeout 280 ${SL_MPIRUN} -np ${np} ${SL_PY}
    ${CMAKE_CURRENT_SOURCE_DIR}/python/test_multimodal.py)
  set_tests_properties(python_multimodal_np${np} PROPERTIES LABELS "python;frontier" TIMEOUT 300 PROCESSORS ${np}
    FIXTURES_REQUIRED models ENVIRONMENT "${SL_PY_ENV}" SKIP_RETURN_CODE 77)
endforeach()
