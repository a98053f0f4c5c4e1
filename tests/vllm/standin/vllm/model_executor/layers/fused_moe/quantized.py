"""STAND-IN for the quantized branches of vllm.model_executor.layers.fused_moe.layer's
FusedMoE.weight_loader (param, loaded_weight, weight_name, shard_id, expert_id), one expert's
checkpoint tensor at a time, expert_id already local:

- WNA16 MoE methods with is_transposed parameters: the checkpoint tensor is transposed first, and
  the dim the MoE rank splits flips (w1/w3: dim 1, w2: dim 0);
- input scales: ModelOpt's [E, 2] take w1 into entry 0 and w3 into 1; others one value per expert;
- g_idx: w2's split like w2, w1/w3's whole;
- ModelOpt: per-tensor (weight_scale_2, input_scale) into [e][0|1] (w1, w3) or [e] (w2); any other
  weight like a weight (gate/up rows, down columns);
- scales, zero points: by the parameter's quant_method: channel (w2 whole, w1/w3 split), group or
  block (split like the weight; w2 whole when load_full_w2), tensor (per-tensor, as ModelOpt's);
- weight_shape: the expert's [2] assigned (converted to the parameter's dtype);
- weights: w1/w3 into the first / second half of the split dim, w2 its share.
"""

WNA16_METHODS = ("CompressedTensorsWNA16MarlinMoEMethod", "CompressedTensorsWNA16MoEMethod")


def _load_w13(data, dim, shard_id, w, tp_rank):
    n = data.shape[dim] // 2
    w = w.narrow(dim, n * tp_rank, n)
    data.narrow(dim, 0 if shard_id == "w1" else n, n).copy_(w)


def _load_w2(data, dim, w, tp_rank, full=False):
    n = data.shape[dim]
    if not full:
        w = w.narrow(dim, n * tp_rank, n)
    data.copy_(w)


def _weight_or_group(data, dim, shard_id, w, tp_rank, full_w2=False):
    if shard_id == "w2":
        _load_w2(data, dim, w, tp_rank, full_w2)
    else:
        _load_w13(data, dim, shard_id, w, tp_rank)


def _per_tensor(param, shard_id, w, e):
    if shard_id in ("w1", "w3"):
        param.data[e][0 if shard_id == "w1" else 1] = w.reshape(())
    else:
        param.data[e] = w.reshape(())


def load_quantized(moe, param, w, weight_name, shard_id, e):
    name = moe.quant_method.name
    transposed = getattr(param, "is_transposed", False)
    if name in WNA16_METHODS and transposed:
        w = w.t().contiguous()
    dim = {"w1": 0, "w2": 1, "w3": 0}[shard_id]
    if transposed:
        dim = 1 - dim
    data = param.data[e]
    tp_rank = moe.tp_rank
    if "input_scale" in weight_name:
        if name.startswith("ModelOpt") and param.dim() == 2 and shard_id in ("w1", "w3"):
            param.data[e][0 if shard_id == "w1" else 1] = w.reshape(())
        else:
            param.data[e] = w
        return
    if "g_idx" in weight_name:
        if shard_id == "w2":
            _load_w2(data, 0, w, tp_rank)
        else:
            data.copy_(w)
        return
    if name.startswith("ModelOpt"):
        if "weight_scale_2" in weight_name:
            _per_tensor(param, shard_id, w, e)
        elif "weight" in weight_name:
            _weight_or_group(data, dim, shard_id, w, tp_rank)
        return
    if "scale" in weight_name or "zero" in weight_name or "offset" in weight_name:
        method = getattr(param, "quant_method", None)
        if method == "channel" and shard_id == "w2":
            data.copy_(w)
        elif method == "channel":
            _load_w13(data, dim, shard_id, w, tp_rank)
        elif method in ("group", "block"):
            _weight_or_group(data, dim, shard_id, w, tp_rank, getattr(param, "load_full_w2", False))
        elif method == "tensor":
            _per_tensor(param, shard_id, w, e)
        else:
            raise ValueError("quant method must be one of channel, group, block, tensor")
        return
    if "weight_shape" in weight_name:
        param.data[e] = w
        return
    if "weight" in weight_name:
        _weight_or_group(data, dim, shard_id, w, tp_rank)
