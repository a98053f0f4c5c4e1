# tests/unit/transpose.cmake — deliveries into parameters held with their last two dimensions
# transposed (src/engine/deliver.c; Llama-4's experts in the vllm layout), byte-exact against an
# independent transposition: test_transpose on the host backend (plain and converted,
# sl_loader_bind_as). The same checks against the CUDA backend on the CPU stand-in of the runtime:
# test_transpose_cuda_mock (label gpumock), in tests/gpu/gpumock.cmake.
sl_unit_test(test_transpose)
