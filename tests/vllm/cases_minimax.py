"""cases_minimax.py -- the vLLM plugin cases of MiniMax-M2 (harness.cases(world, "minimax")): the
stand-in's MiniMaxM2ForCausalLM (k_norm sharded by key/value head, router and correction bias in
float32, block_sparse_moe experts) against vLLM's weight_loader rules over the whole checkpoint."""


def cases(world, C):
    if world == 1:
        return [C("minimax_m2", "minimax_m2")]
    if world == 2:
        return [C("minimax_m2 tp2", "minimax_m2", tp=2), C("minimax_m2 tp2 ep", "minimax_m2", tp=2, ep=True),
                C("minimax_m2 pp2", "minimax_m2", pp=2)]
    if world == 4:
        return [C("minimax_m2 tp4 (kv heads replicated)", "minimax_m2", tp=4),
                C("minimax_m2 tp2 dp2 ep", "minimax_m2", tp=2, dp=2, ep=True)]
    return []
