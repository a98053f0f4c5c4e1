# The multimodal wrappers through `shardload load` at 2 ranks (labels cli, frontier): qwen3_vl's saved
# fused attn.qkv blocks, gemma3_mm at pp 2 (the tower, embedding and norm on both stages), the
# language model alone with --language-model-only / --skip-vision.
sl_script_test(test_cli_multimodal cli sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_multimodal.sh)
set_tests_properties(test_cli_multimodal PROPERTIES LABELS "cli;frontier" TIMEOUT 120 PROCESSORS 2)
