"""The autograd hooks zrt.torch needs, through torch's public APIs where the running torch has
them (2.x) and the older ones on torch 1.13.

- first_gradient(tensors, fn): fn() once, when the first gradient of any of tensors is computed
  (a unit's backward begins). 2.x: torch.autograd.graph.register_multi_grad_hook(mode="any");
  1.13: a hook on each tensor, the first call wins.
- after_accumulation(param, fn): fn() each time autograd has added a gradient into param.grad.
  2.x: Tensor.register_post_accumulate_grad_hook; 1.13: a hook on the AccumulateGrad node.
- at_backward_end(fn): fn() once the running backward pass has finished. torch has no public
  call for this in 1.13 or 2.13; DDP and FSDP2 use the engine's queue_callback, and so does zrt.
"""
import inspect

import torch

_multi_grad_hook = getattr(getattr(torch.autograd, "graph", None), "register_multi_grad_hook",
                           None)
_MULTI_GRAD_ANY = (_multi_grad_hook is not None
                   and "mode" in inspect.signature(_multi_grad_hook).parameters)
_POST_ACCUMULATE = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


def first_gradient(tensors, fn):
    tensors = [t for t in tensors if t.requires_grad]
    if not tensors:
        return
    if _MULTI_GRAD_ANY:
        _multi_grad_hook(tensors, lambda grad: fn(), mode="any")
        return
    fired = []

    def once(grad):
        if not fired:
            fired.append(True)
            fn()

    for tensor in tensors:
        tensor.register_hook(once)


def after_accumulation(param, fn):
    """Returns the handle (and keeps what the hook needs alive through it)."""
    if _POST_ACCUMULATE:
        return param.register_post_accumulate_grad_hook(lambda p: fn())
    # torch 1.13: the AccumulateGrad node of param, reached through a view; the handle keeps it.
    accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
    handle = accumulator.register_hook(lambda grads_in, grads_out: fn())
    handle.accumulator = accumulator
    return handle


def at_backward_end(fn):
    torch.autograd.Variable._execution_engine.queue_callback(fn)
