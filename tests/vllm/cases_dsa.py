"""cases_dsa.py -- the vLLM plugin cases of DeepSeek-V3.2 and GLM-5 (harness.cases(world, "dsa")):
the stand-in's DeepseekV2ForCausalLM (MLA, the sparse-attention indexer with its fused
wk_weights_proj and float32 LayerNorm, MoE) and DeepSeekMTP (the draft vLLM names
DeepSeekMTPModel, loaded by shardload through its architecture name) against vLLM's weight_loader
rules over the whole checkpoint, every parameter byte for byte."""


def cases(world, C):
    if world == 1:
        return [C("deepseek_v32", "deepseek_v32"),
                C("glm5 (BF16 k_norm into float32)", "glm5"),
                C("glm5 draft (DeepSeekMTP)", "glm5", draft="glm5")]
    if world == 2:
        return [C("deepseek_v32 tp2", "deepseek_v32", tp=2),
                C("deepseek_v32 pp2", "deepseek_v32", pp=2),
                C("glm5 tp2 ep", "glm5", tp=2, ep=True),
                C("glm5 draft tp2", "glm5", tp=2, draft="glm5"),
                C("deepseek_v32 draft dp2 ep", "deepseek_v32", dp=2, ep=True, draft="deepseek_v32")]
    if world == 4:
        return [C("deepseek_v32 tp4", "deepseek_v32", tp=4),
                C("glm5 tp2 dp2 ep", "glm5", tp=2, dp=2, ep=True),
                C("glm5 draft tp4", "glm5", tp=4, draft="glm5")]
    return []
