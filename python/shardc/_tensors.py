"""_tensors.py — arrays in, arrays out: the library's sc_host_tensor.

Inputs: anything with the buffer protocol or DLPack (NumPy arrays, PyTorch
CPU tensors through np.from_dlpack). An array that is C-contiguous, aligned
and of a dtype the library knows is passed by its address: the library
reads the caller's memory, no copy. Anything else (a strided view, a
Python list) is converted once by np.ascontiguousarray, and its name is
reported among the copies.

Outputs: the library allocates each output (sc_executable_run); an output
becomes a NumPy array over that memory with no copy, and the memory is
freed (sc_host_tensors_free) when the last array over it goes. copy=True
returns an array owning a copy of it instead (arr.flags.owndata).
"""
import ctypes

import numpy as np

from . import _lib
from ._lib import lib

# ONNX TensorProto.DataType -> numpy dtype (bfloat16 has none in NumPy).
DTYPES = {1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8),
          4: np.dtype(np.uint16), 5: np.dtype(np.int16), 6: np.dtype(np.int32),
          7: np.dtype(np.int64), 9: np.dtype(np.bool_), 10: np.dtype(np.float16),
          11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64)}
ONNX_OF = {v: k for k, v in DTYPES.items()}


def as_array(x):
    """x as a NumPy array sharing its memory where it can."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array_interface__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, RuntimeError, BufferError):
            pass
    return np.asarray(x)


def as_host_tensors(named):
    """{name: array-like} as a ctypes array of sc_host_tensor; the arrays
    to keep alive during the call; the names of the inputs copied."""
    items = list(named.items())
    hosts = (_lib.HostTensor * max(1, len(items)))()
    keep, copied = [], []
    for i, (name, x) in enumerate(items):
        a = as_array(x)
        if a.dtype not in ONNX_OF:
            from ._errors import UsageError
            raise UsageError(f"input '{name}': dtype {a.dtype} is not one shardc reads", "usage")
        if a.ndim > 8:
            from ._errors import UsageError
            raise UsageError(f"input '{name}': rank {a.ndim} (at most 8)", "usage")
        if not (a.flags.c_contiguous and a.flags.aligned):
            a = np.ascontiguousarray(a)
            copied.append(name)
        keep.append(a)
        h = hosts[i]
        h.name = name.encode()
        h.dtype = ONNX_OF[a.dtype]
        h.rank = a.ndim
        for k, d in enumerate(a.shape):
            h.dims[k] = d
        h.data = a.ctypes.data if a.size else None
    return hosts, keep, copied


class _Owned:
    """Memory the library allocated for one output, freed with this object
    (the base of the arrays over it)."""

    def __init__(self, ptr, dtype, shape):
        self.ptr = ptr
        self.__array_interface__ = {"data": (ptr, False), "typestr": dtype.str,
                                    "shape": tuple(shape), "version": 3}

    def __del__(self):
        t = _lib.HostTensor(data=self.ptr)
        lib.sc_host_tensors_free(ctypes.byref(t), 1)


def view_of(t):
    """A NumPy view of a host tensor's data (not owned)."""
    dt = DTYPES[t.dtype]
    shape = tuple(t.dims[:t.rank])
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    buf = (ctypes.c_char * (n * dt.itemsize)).from_address(t.data)
    return np.frombuffer(buf, dtype=dt).reshape(shape)


def outputs_to_arrays(outs, n, copy):
    """The library's outputs as {name: array}; an output another rank owns
    (under mpi) is None."""
    res = {}
    for k in range(n):
        t = outs[k]
        name = t.name.decode()
        if not t.data:
            res[name] = None
            continue
        dt = DTYPES.get(t.dtype)
        if dt is None:
            lib.sc_host_tensors_free(ctypes.byref(t), 1)
            from ._errors import UsageError
            raise UsageError(f"output '{name}': ONNX dtype {t.dtype} has no NumPy dtype",
                             "unsupported")
        a = np.asarray(_Owned(t.data, dt, t.dims[:t.rank]))
        res[name] = a.copy() if copy else a
    return res
