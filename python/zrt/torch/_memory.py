"""Torch tensors over memory zrt owns, without copies.

Host memory: torch.frombuffer over a ctypes array at the address (the tensor keeps the array
object alive; zrt keeps the memory). CUDA memory: torch.as_tensor over an object with
__cuda_array_interface__. Both are made as bytes and viewed as the dtype, which also covers
bfloat16 (which neither the buffer protocol nor the CUDA array interface can name).
"""
import ctypes

import torch

from .. import _lib

DTYPES = {torch.float32: _lib.F32, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16}


def zrt_dtype(dtype, what):
    if dtype not in DTYPES:
        raise TypeError(f"zrt.torch: {what} has dtype {dtype}; zrt holds parameters in "
                        "float32, float16 or bfloat16 (convert the model, e.g. model.float())")
    return DTYPES[dtype]


class _CudaBytes:
    def __init__(self, address, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (address, False), "version": 2}


def tensor_at(address, shape, dtype, device):
    """A tensor of `shape` and `dtype` over the memory at `address` (an int)."""
    numel = 1
    for dim in shape:
        numel *= dim
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if device.type == "cuda":
        raw = torch.as_tensor(_CudaBytes(address, nbytes), device=device)
    else:
        raw = torch.frombuffer((ctypes.c_byte * nbytes).from_address(address), dtype=torch.uint8)
    return raw.view(dtype).view(shape)


def placeholder(shape, dtype, device):
    """A tensor of `shape` over one element's memory, for what is re-pointed at zrt's memory
    before it is read (a shard-sized placeholder would be memory zrt's total does not count)."""
    return torch.zeros((), dtype=dtype, device=device).expand(shape)


def order_before_zrt(device):
    """zrt's CUDA work is ordered after the legacy default stream and blocking streams (docs/
    API.md, CUDA): torch's default stream is the legacy one; work on a stream of the user's
    own is waited for on the host before zrt takes over the memory it wrote."""
    if device.type == "cuda":
        current = torch.cuda.current_stream(device)
        if current != torch.cuda.default_stream(device):
            current.synchronize()
