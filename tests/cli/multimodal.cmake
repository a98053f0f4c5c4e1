# The multimodal wrappers through `shardload load` at 2 ranks (labels cli, frontier): qwen3_vl's saved
# fused attn.qkv blocks, gemma3_mm at pp 2 (the tower, embedding and norm on both stages), the
# language model alone with --language-model-only / --skip-vision; kimi_k25_w4a16 (W4A16 experts,
# BF16 MoonViT) at tp 2 with and without its tower, the summary's counts.
sl_script_test(test_cli_multimodal cli sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli_multimodal.sh)
set_tests_properties(test_cli_multimodal PROPERTIES LABELS "cli;frontier" TIMEOUT 120 PROCESSORS 2)
