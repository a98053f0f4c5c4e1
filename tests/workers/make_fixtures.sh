#!/bin/sh
# The variations of the fixture models the worker tests load (FIXTURES_SETUP workers_models):
#   llama_tied  llama with a tied head (no lm_head tensor): the embedding lives on the first and
#               the last pipeline stage;
#   llama_l4    llama with a fourth layer, so that 3 stages split 4 layers unevenly (vLLM gives the
#               extra layer to the stage before the last: 1, 2, 1).
# Usage: make_fixtures.sh OUTDIR
set -eu
src="$(cd "$(dirname "$0")/../.." && pwd)"
out="$1"
mk="$src/scripts/make-fixture"
"$mk" llama "$out/llama_tied" --set-config tie_word_embeddings=true --drop lm_head.weight
l=model.layers.3
"$mk" llama "$out/llama_l4" --set-config num_hidden_layers=4 \
  --extra $l.input_layernorm.weight:BF16:64 --extra $l.post_attention_layernorm.weight:BF16:64 \
  --extra $l.self_attn.q_proj.weight:BF16:64,64 --extra $l.self_attn.k_proj.weight:BF16:16,64 \
  --extra $l.self_attn.v_proj.weight:BF16:16,64 --extra $l.self_attn.o_proj.weight:BF16:64,64 \
  --extra $l.mlp.gate_proj.weight:BF16:128,64 --extra $l.mlp.up_proj.weight:BF16:128,64 \
  --extra $l.mlp.down_proj.weight:BF16:64,128
