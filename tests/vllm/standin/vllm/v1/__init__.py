"""STAND-IN for vllm.v1: the worker and executor classes a worker extension meets."""
