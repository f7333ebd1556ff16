"""ctypes binding over libqfuse's C API.

Tensors go in through DLPack: any object with ``__dlpack__`` (NumPy arrays on the CPU, torch or
CuPy tensors on the GPU) is handed to the C library without a copy. Frameworks without FP8 dtypes
(NumPy) pass FP8 data as uint8 arrays relabelled with :func:`view`.

    import numpy as np, qfuse
    ctx = qfuse.Context("cpu")
    x = np.random.randn(4, 64).astype(np.float32)
    q = np.empty((4, 64), np.uint8)
    ctx.quant_per_tensor(x, np.array([0.05], np.float32), qfuse.view(q, "e4m3fn"))
"""
import ctypes
import os

__all__ = ["Context", "QfuseError", "view", "version", "DTYPES"]

# Order and values follow qf_dtype in include/qfuse.h.
DTYPES = {"bf16": 0, "fp16": 1, "fp32": 2, "int8": 3, "int32": 4, "e4m3fn": 5, "e4m3fnuz": 6,
          "e5m2": 7, "ue8m0": 8, "e2m1x2": 9}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


def _load():
    path = os.environ.get("QFUSE_LIBRARY")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        for cand in (os.path.join(here, "libqfuse.so"),
                     os.path.join(here, "..", "..", "build", "libqfuse.so")):
            if os.path.exists(cand):
                path = cand
                break
    if not path:
        raise OSError("libqfuse.so not found: set QFUSE_LIBRARY or build into ./build")
    lib = ctypes.CDLL(path)
    lib.qf_version.restype = ctypes.c_char_p
    lib.qf_status_str.restype = ctypes.c_char_p
    lib.qf_status_str.argtypes = [ctypes.c_int]
    lib.qf_ctx_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
    lib.qf_ctx_destroy.argtypes = [ctypes.c_void_p]
    lib.qf_ctx_set_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.qf_ctx_last_error.restype = ctypes.c_char_p
    lib.qf_ctx_last_error.argtypes = [ctypes.c_void_p]
    lib.qf_dtype_to_dl.restype = DLDataType
    lib.qf_dtype_to_dl.argtypes = [ctypes.c_int]
    lib.qf_quant_per_tensor.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(DLTensor)] * 3
    return lib


_lib = _load()

_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def version():
    return _lib.qf_version().decode()


class QfuseError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"{_lib.qf_status_str(status).decode()}: {message}")
        self.status = status


class view:
    """An object with ``__dlpack__`` seen by qfuse with another dtype of the same width
    (e.g. a uint8 NumPy array as e4m3fn)."""

    def __init__(self, obj, dtype):
        if dtype not in DTYPES:
            raise ValueError(f"unknown qfuse dtype {dtype!r}; one of {sorted(DTYPES)}")
        self.obj, self.dtype = obj, dtype


class _Arg:
    """A DLTensor borrowed from an object's __dlpack__ capsule, kept alive with it."""

    def __init__(self, obj):
        dtype = None
        if isinstance(obj, view):
            obj, dtype = obj.obj, obj.dtype
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"{type(obj).__name__} has no __dlpack__")
        self.capsule = obj.__dlpack__()
        if not _pyapi.PyCapsule_IsValid(self.capsule, b"dltensor"):
            raise TypeError("expected an unversioned 'dltensor' capsule from __dlpack__()")
        managed = ctypes.cast(_pyapi.PyCapsule_GetPointer(self.capsule, b"dltensor"),
                              ctypes.POINTER(DLManagedTensor))
        self.tensor = DLTensor.from_buffer_copy(managed.contents.dl_tensor)
        if dtype is not None:
            want = _lib.qf_dtype_to_dl(DTYPES[dtype])
            have = self.tensor.dtype
            if have.bits * have.lanes != want.bits:
                raise ValueError(f"cannot view {have.bits}-bit data as {dtype}")
            self.tensor.dtype = want
        # The capsule is not consumed (its name stays 'dltensor'), so the producer frees it.

    def ptr(self):
        return ctypes.byref(self.tensor)


class Context:
    """A qfuse context on the CPU (``"cpu"``) or a CUDA device (``"cuda"`` or ``"cuda:N"``)."""

    def __init__(self, device="cpu"):
        kind, _, idx = device.partition(":")
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
        self._ctx = ctypes.c_void_p()
        st = _lib.qf_ctx_create(ctypes.byref(self._ctx), 0 if kind == "cpu" else 1, int(idx or 0))
        if st:
            raise QfuseError(st, f"qf_ctx_create({device!r}) failed")

    def __del__(self):
        if getattr(self, "_ctx", None):
            _lib.qf_ctx_destroy(self._ctx)
            self._ctx = None

    def set_stream(self, stream_handle):
        """Launch on this cudaStream_t (an int, e.g. torch.cuda.current_stream().cuda_stream)."""
        self._check(_lib.qf_ctx_set_stream(self._ctx, ctypes.c_void_p(stream_handle)))

    def _check(self, status):
        if status:
            raise QfuseError(status, _lib.qf_ctx_last_error(self._ctx).decode())

    def quant_per_tensor(self, x, scale, q):
        """q = encode(x / scale): see qf_quant_per_tensor in qfuse.h."""
        args = [_Arg(t) for t in (x, scale, q)]
        self._check(_lib.qf_quant_per_tensor(self._ctx, *(a.ptr() for a in args)))
