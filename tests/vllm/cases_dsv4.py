"""cases_dsv4.py -- the vLLM plugin cases of DeepSeek-V4 (harness.cases(world, "dsv4")): the stand-in's
DeepseekV4ForCausalLM (flat checkpoint names mapped as vLLM maps them, block fp8 with E8M0 or F32
scales, FP4 or FP8 experts, the attention sink padded to 64 heads, the hash table in int32, the
indexer's k_norm left at its initial values, modules registered under several names) against
vLLM's weight_loader rules over the whole checkpoint. expect_handed: the attention sinks (one per
layer the worker holds), whose padded parameter takes the rank's heads in its leading slots."""


def cases(world, C):
    if world == 1:
        return [C("deepseek_v4", "deepseek_v4", expect_handed=5),
                C("deepseek_v4_fp8e", "deepseek_v4_fp8e", expect_handed=3)]
    if world == 2:
        return [C("deepseek_v4 tp2", "deepseek_v4", tp=2, expect_handed=5),
                C("deepseek_v4 tp2 ep", "deepseek_v4", tp=2, ep=True, expect_handed=5),
                C("deepseek_v4 pp2 (hc_head on both stages)", "deepseek_v4", pp=2, expect_handed=None),
                C("deepseek_v4_fp8e tp2", "deepseek_v4_fp8e", tp=2, expect_handed=3)]
    if world == 4:
        return [C("deepseek_v4 tp4", "deepseek_v4", tp=4, expect_handed=5),
                C("deepseek_v4 tp2 dp2 ep", "deepseek_v4", tp=2, dp=2, ep=True, expect_handed=5)]
    return []
