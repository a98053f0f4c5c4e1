"""STAND-IN for vllm.model_executor.utils: set_weight_attrs puts loading attributes (weight_loader,
output_dim, ...) on a Parameter, refusing to overwrite one, as vLLM does."""


def set_weight_attrs(weight, attrs):
    for key, value in (attrs or {}).items():
        assert not hasattr(weight, key), "overwriting existing tensor attribute: %s" % key
        setattr(weight, key, value)
