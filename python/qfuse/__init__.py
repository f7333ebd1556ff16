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
import ctypes.util
import os

__all__ = ["Context", "QfuseError", "view", "version", "DTYPES"]

# Order and values follow qf_dtype in include/qfuse.h.
DTYPES = {"bf16": 0, "fp16": 1, "fp32": 2, "int8": 3, "int32": 4, "e4m3fn": 5, "e4m3fnuz": 6,
          "e5m2": 7, "ue8m0": 8, "e2m1x2": 9, "uint8": 10}


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


# Option structs, field for field as in qfuse.h.
class GroupQuantOpts(ctypes.Structure):
    _fields_ = [("group_size", ctypes.c_int), ("scale_layout", ctypes.c_int), ("scale_format", ctypes.c_int),
                ("scale_min", ctypes.c_float), ("scale_ub", ctypes.POINTER(DLTensor))]


class GluOpts(ctypes.Structure):
    _fields_ = [("alpha", ctypes.c_float), ("limit", ctypes.c_float), ("up_plus_one", ctypes.c_int), ("fast_exp", ctypes.c_int)]


class TokenQuantOpts(ctypes.Structure):
    _fields_ = [("scale_min", ctypes.c_float), ("scale_ub", ctypes.POINTER(DLTensor))]


class TensorQuantOpts(ctypes.Structure):
    _fields_ = [("dynamic", ctypes.c_int), ("scale_min", ctypes.c_float)]


class RmsNormQuantOpts(ctypes.Structure):
    _fields_ = [("eps", ctypes.c_float), ("group_size", ctypes.c_int), ("group", GroupQuantOpts)]


class GemmBlockscaleOpts(ctypes.Structure):
    _fields_ = [("c", ctypes.POINTER(DLTensor)), ("a_scales_row_major", ctypes.c_int), ("fine_promotion", ctypes.c_int)]


class GemmGroupedOpts(ctypes.Structure):
    _fields_ = [("epilogue", ctypes.c_int), ("a_scales_row_major", ctypes.c_int)]


GROUPED_EPILOGUES = {"none": 0, "swiglu": 1}


class GemmScaledOpts(ctypes.Structure):
    _fields_ = [("bias", ctypes.POINTER(DLTensor)), ("azp_adj", ctypes.POINTER(DLTensor)),
                ("azp", ctypes.POINTER(DLTensor))]


class VqFormat(ctypes.Structure):
    _fields_ = [("vector_size", ctypes.c_int), ("index_bits", ctypes.c_int), ("residuals", ctypes.c_int),
                ("scope_rows", ctypes.c_int), ("scope_cols", ctypes.c_int), ("entry_dtype", ctypes.c_int),
                ("row_scale", ctypes.c_int), ("lattice", ctypes.c_int)]


class VqSizes(ctypes.Structure):
    _fields_ = [("row_bytes", ctypes.c_int64), ("n_books", ctypes.c_int64), ("books_per_row", ctypes.c_int64),
                ("entries", ctypes.c_int64), ("bits_per_value", ctypes.c_double)]


class VqQuantizeOpts(ctypes.Structure):
    _fields_ = [("iterations", ctypes.c_int), ("seed", ctypes.c_uint64), ("threads", ctypes.c_int)]


class VqStats(ctypes.Structure):
    _fields_ = [("rel_mse", ctypes.c_double), ("entries", ctypes.c_int64), ("unused_entries", ctypes.c_int64),
                ("hot_entries", ctypes.c_int64), ("hot_share", ctypes.c_double)]


class AttentionOpts(ctypes.Structure):
    _fields_ = [("sm_scale", ctypes.c_float), ("causal", ctypes.c_int), ("window", ctypes.c_int64),
                ("k_scale", ctypes.POINTER(DLTensor)), ("v_scale", ctypes.POINTER(DLTensor))]


def _attention_opts(sm_scale, causal, window, k_scale, v_scale):
    """The attention calls' options, and the scale tensors they point to (keep them alive for the call)."""
    ks = _Arg(k_scale) if k_scale is not None else None
    vs = _Arg(v_scale) if v_scale is not None else None
    opt = AttentionOpts(sm_scale, 1 if causal else 0, window, ctypes.pointer(ks.tensor) if ks else None,
                        ctypes.pointer(vs.tensor) if vs else None)
    return opt, (ks, vs)


class VqAttentionOpts(ctypes.Structure):
    _fields_ = [("head_dim", ctypes.c_int), ("kv_heads", ctypes.c_int), ("seq_len", ctypes.c_int64),
                ("sm_scale", ctypes.c_float), ("kv_lens", ctypes.POINTER(DLTensor)),
                ("block_table", ctypes.POINTER(DLTensor)), ("page_size", ctypes.c_int64)]


def _vq_attention_opts(head_dim, kv_heads, seq_len, sm_scale, kv_lens, block_table, page_size):
    """The VQ attention calls' options, and the tensors they point to (keep them alive for the call)."""
    lens = _Arg(kv_lens) if kv_lens is not None else None
    table = _Arg(block_table) if block_table is not None else None
    opt = VqAttentionOpts(head_dim, kv_heads, seq_len, sm_scale, ctypes.pointer(lens.tensor) if lens else None,
                          ctypes.pointer(table.tensor) if table else None, page_size)
    return opt, (lens, table)


VQ_PRESETS = {"gptvq-2": 0, "cq-2": 1, "cq-4": 2, "aqlm-3": 3, "quip-4": 4}
VQ_LATTICES = {None: 0, "e8p": 1}

SCALE_LAYOUTS = {"row_major": 0, "col_major": 1, "col_major_tma": 2}
SCALE_FORMATS = {"f32": 0, "f32_pow2": 1, "ue8m0_packed": 2}


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
        path = ctypes.util.find_library("qfuse")  # an installed library (cmake --install, ldconfig)
    if not path:
        raise OSError("libqfuse.so not found: set QFUSE_LIBRARY, build into ./build or install it")
    lib = ctypes.CDLL(path)
    lib.qf_version.restype = ctypes.c_char_p
    lib.qf_status_str.restype = ctypes.c_char_p
    lib.qf_status_str.argtypes = [ctypes.c_int]
    lib.qf_ctx_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
    lib.qf_ctx_destroy.argtypes = [ctypes.c_void_p]
    lib.qf_ctx_set_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.qf_ctx_set_pdl.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.qf_ctx_reserve_workspace.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.qf_ctx_workspace_bytes.restype = ctypes.c_size_t
    lib.qf_ctx_workspace_bytes.argtypes = [ctypes.c_void_p]
    lib.qf_ctx_last_error.restype = ctypes.c_char_p
    lib.qf_ctx_last_error.argtypes = [ctypes.c_void_p]
    lib.qf_dtype_to_dl.restype = DLDataType
    lib.qf_dtype_to_dl.argtypes = [ctypes.c_int]
    T = ctypes.POINTER(DLTensor)
    lib.qf_quant_per_tensor.argtypes = [ctypes.c_void_p, T, T, T]
    lib.qf_quant_group.argtypes = [ctypes.c_void_p, T, T, T, ctypes.POINTER(GroupQuantOpts)]
    lib.qf_silu_mul_quant_group.argtypes = [ctypes.c_void_p, T, T, T, ctypes.POINTER(GluOpts),
                                            ctypes.POINTER(GroupQuantOpts)]
    lib.qf_quant_token.argtypes = [ctypes.c_void_p, T, T, T, T, ctypes.POINTER(TokenQuantOpts)]
    lib.qf_quant_tensor.argtypes = [ctypes.c_void_p, T, T, T, ctypes.POINTER(TensorQuantOpts)]
    lib.qf_rms_norm_quant.argtypes = [ctypes.c_void_p, T, T, T, T, T, ctypes.POINTER(RmsNormQuantOpts)]
    lib.qf_gemm_fp8_blockscale.argtypes = [ctypes.c_void_p, T, T, T, T, T, ctypes.POINTER(GemmBlockscaleOpts)]
    lib.qf_gemm_fp8_blockscale_grouped.argtypes = [ctypes.c_void_p, T, T, T, T, T, T, ctypes.POINTER(GemmGroupedOpts)]
    lib.qf_gemm_fp8_blockscale_masked.argtypes = [ctypes.c_void_p, T, T, T, T, T, T, ctypes.POINTER(GemmGroupedOpts)]
    lib.qf_gemm_scaled.argtypes = [ctypes.c_void_p, T, T, T, T, T, ctypes.POINTER(GemmScaledOpts)]
    lib.qf_gemm_azp_adj.argtypes = [ctypes.c_void_p, T, ctypes.c_int32, T]
    lib.qf_quant_nvfp4.argtypes = [ctypes.c_void_p, T, T, T, T]
    lib.qf_nvfp4_pack.argtypes = [ctypes.c_void_p, T, T]
    lib.qf_gemm_nvfp4.argtypes = [ctypes.c_void_p, T, T, T, T, T]
    lib.qf_vq_format_preset.argtypes = [ctypes.c_int, ctypes.POINTER(VqFormat)]
    lib.qf_vq_sizes_of.argtypes = [ctypes.c_void_p, ctypes.POINTER(VqFormat), ctypes.c_int64, ctypes.c_int64,
                                   ctypes.POINTER(VqSizes)]
    lib.qf_vq_quantize.argtypes = [ctypes.c_void_p, T, ctypes.POINTER(VqFormat), ctypes.POINTER(VqQuantizeOpts), T, T, T,
                                   ctypes.POINTER(VqStats)]
    lib.qf_vq_dequantize.argtypes = [ctypes.c_void_p, T, T, T, ctypes.POINTER(VqFormat), T]
    lib.qf_vq_encode.argtypes = [ctypes.c_void_p, T, ctypes.c_int64, T, ctypes.POINTER(VqFormat), T, T]
    lib.qf_vq_encode_slots.argtypes = [ctypes.c_void_p, T, T, T, ctypes.POINTER(VqFormat), T, T]
    lib.qf_vq_encode_kv_slots.argtypes = [ctypes.c_void_p, T, T, T, T, T, ctypes.POINTER(VqFormat), T, T, T, T]
    lib.qf_vq_gemm.argtypes = [ctypes.c_void_p, T, T, T, T, ctypes.POINTER(VqFormat), T]
    lib.qf_vq_pack_gemv_shape.argtypes = [ctypes.c_void_p, ctypes.POINTER(VqFormat), ctypes.c_int64, ctypes.c_int64,
                                          ctypes.POINTER(ctypes.c_int64)]
    lib.qf_vq_pack_gemv.argtypes = [ctypes.c_void_p, T, ctypes.POINTER(VqFormat), ctypes.c_int64, T]
    lib.qf_vq_pack_attention_books.argtypes = [ctypes.c_void_p, T, ctypes.POINTER(VqFormat), ctypes.c_int64,
                                               ctypes.c_int64, T]
    lib.qf_attention.argtypes = [ctypes.c_void_p, T, T, T, T, ctypes.POINTER(AttentionOpts), T, T]
    lib.qf_attention_paged.argtypes = [ctypes.c_void_p, T, T, T, T, T, T, ctypes.POINTER(AttentionOpts), T, T]
    lib.qf_attention_varlen.argtypes = [ctypes.c_void_p, T, T, T, T, T, ctypes.c_int64, ctypes.c_int64, T,
                                        ctypes.POINTER(AttentionOpts), T, T]
    lib.qf_attention_paged_varlen.argtypes = [ctypes.c_void_p, T, T, T, T, T, T, ctypes.c_int64, T,
                                              ctypes.POINTER(AttentionOpts), T, T]
    lib.qf_vq_attention_decode.argtypes = [ctypes.c_void_p, T, T, T, T, T, ctypes.POINTER(VqFormat),
                                           ctypes.POINTER(VqAttentionOpts), T, T]
    lib.qf_vq_attention_decode_append.argtypes = [ctypes.c_void_p, T, T, T, T, T, T, T, ctypes.POINTER(VqFormat),
                                                  ctypes.POINTER(VqAttentionOpts), T, T]
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
            if dtype == "e2m1x2" and have.bits * have.lanes == 8:
                self._bytes_as_fp4()
            elif have.bits * have.lanes != want.bits:
                raise ValueError(f"cannot view {have.bits}-bit data as {dtype}")
            self.tensor.dtype = want
        # The capsule is not consumed (its name stays 'dltensor'), so the producer frees it.

    def _bytes_as_fp4(self):
        """Bytes [..., n] as e2m1x2 [..., 2 n]: qfuse's fp4 shapes and strides count values."""
        t = self.tensor
        nd = t.ndim
        shape = [t.shape[i] for i in range(nd)]
        strides = [t.strides[i] for i in range(nd)] if t.strides else None
        if strides is None:
            strides = [1] * nd
            for i in range(nd - 2, -1, -1):
                strides[i] = strides[i + 1] * shape[i + 1]
        if nd and shape[-1] > 1 and strides[-1] != 1:
            raise ValueError("e2m1x2 view: the last dimension must be contiguous")
        shape[-1] *= 2
        strides = [2 * st for st in strides[:-1]] + [1]
        self._shape = (ctypes.c_int64 * nd)(*shape)
        self._strides = (ctypes.c_int64 * nd)(*strides)
        t.shape = ctypes.cast(self._shape, type(t.shape))
        t.strides = ctypes.cast(self._strides, type(t.strides))

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

    def set_pdl(self, enable=True):
        """Programmatic dependent launch (qf_ctx_set_pdl): the GEMMs and the group, token and
        per-tensor quantizations (RMSNorm + quant at decode) may start while the kernel before them
        in the stream finishes, and wait for it before touching its data."""
        self._check(_lib.qf_ctx_set_pdl(self._ctx, 1 if enable else 0))

    def reserve_workspace(self, nbytes):
        """Grow the device workspace to at least nbytes now (qf_ctx_reserve_workspace), so that the
        calls of a CUDA graph's capture need not allocate: the GEMMs need at most 4 KB + 128 KB per
        SM. A call that would have to grow it during a capture raises instead."""
        self._check(_lib.qf_ctx_reserve_workspace(self._ctx, int(nbytes)))

    @property
    def workspace_bytes(self):
        """The bytes of device workspace the context holds (qf_ctx_workspace_bytes)."""
        return int(_lib.qf_ctx_workspace_bytes(self._ctx))

    def _check(self, status):
        if status:
            raise QfuseError(status, _lib.qf_ctx_last_error(self._ctx).decode())

    def quant_per_tensor(self, x, scale, q):
        """q = encode(x / scale): see qf_quant_per_tensor in qfuse.h."""
        args = [_Arg(t) for t in (x, scale, q)]
        self._check(_lib.qf_quant_per_tensor(self._ctx, *(a.ptr() for a in args)))

    # Every method below mirrors the C function of the same name (qfuse.h has the contracts).
    # Tensor arguments: objects with __dlpack__ (or qfuse.view); None for an absent optional one.

    @staticmethod
    def _group_opts(group_size, scale_layout, scale_format, scale_min, scale_ub, keep):
        ub = _Arg(scale_ub) if scale_ub is not None else None
        keep.append(ub)
        return GroupQuantOpts(group_size, SCALE_LAYOUTS[scale_layout], SCALE_FORMATS[scale_format], scale_min,
                              ctypes.pointer(ub.tensor) if ub else None)

    def quant_group(self, x, q, scales, group_size=128, scale_layout="row_major", scale_format="f32",
                    scale_min=0.0, scale_ub=None):
        keep = [_Arg(t) for t in (x, q, scales)]
        o = self._group_opts(group_size, scale_layout, scale_format, scale_min, scale_ub, keep)
        self._check(_lib.qf_quant_group(self._ctx, *(a.ptr() for a in keep[:3]), ctypes.byref(o)))

    def silu_mul_quant_group(self, x, q, scales, alpha=0.0, limit=0.0, up_plus_one=False, group_size=128,
                             scale_layout="row_major", scale_format="f32", scale_min=0.0, scale_ub=None,
                             fast_exp=False):
        keep = [_Arg(t) for t in (x, q, scales)]
        o = self._group_opts(group_size, scale_layout, scale_format, scale_min, scale_ub, keep)
        g = GluOpts(alpha, limit, int(up_plus_one), int(fast_exp))
        self._check(_lib.qf_silu_mul_quant_group(self._ctx, *(a.ptr() for a in keep[:3]), ctypes.byref(g),
                                                 ctypes.byref(o)))

    def quant_token(self, x, q, scales, azp=None, scale_min=0.0, scale_ub=None):
        keep = [_Arg(t) for t in (x, q, scales)]
        z = _Arg(azp) if azp is not None else None
        ub = _Arg(scale_ub) if scale_ub is not None else None
        o = TokenQuantOpts(scale_min, ctypes.pointer(ub.tensor) if ub else None)
        self._check(_lib.qf_quant_token(self._ctx, *(a.ptr() for a in keep), z.ptr() if z else None,
                                        ctypes.byref(o)))

    def quant_tensor(self, x, q, scale, dynamic=False, scale_min=0.0):
        keep = [_Arg(t) for t in (x, q, scale)]
        o = TensorQuantOpts(int(dynamic), scale_min)
        self._check(_lib.qf_quant_tensor(self._ctx, *(a.ptr() for a in keep), ctypes.byref(o)))

    def rms_norm_quant(self, x, residual, weight, q, scales, eps=0.0, group_size=128, scale_layout="row_major",
                       scale_format="f32", scale_min=0.0, scale_ub=None):
        """group_size=-1 quantizes per token."""
        keep = [_Arg(t) for t in (x, weight, q, scales)]
        r = _Arg(residual) if residual is not None else None
        g = self._group_opts(0, scale_layout, scale_format, scale_min, scale_ub, keep)
        o = RmsNormQuantOpts(eps, group_size, g)
        self._check(_lib.qf_rms_norm_quant(self._ctx, keep[0].ptr(), r.ptr() if r else None, keep[1].ptr(),
                                           keep[2].ptr(), keep[3].ptr(), ctypes.byref(o)))

    def gemm_fp8_blockscale(self, a, a_scales, b, b_scales, d, c=None, a_scales_row_major=False, fine_promotion=False):
        keep = [_Arg(t) for t in (a, a_scales, b, b_scales, d)]
        ca = _Arg(c) if c is not None else None
        o = GemmBlockscaleOpts(ctypes.pointer(ca.tensor) if ca else None, int(a_scales_row_major), int(fine_promotion))
        self._check(_lib.qf_gemm_fp8_blockscale(self._ctx, *(x.ptr() for x in keep), ctypes.byref(o)))

    def gemm_fp8_blockscale_grouped(self, a, a_scales, b, b_scales, expert_ids, d, epilogue="none",
                                    a_scales_row_major=False):
        """Contiguous MoE layout: expert_ids [ceil(M/128)] (e.g. a per-row index [::128]); epilogue "swiglu"."""
        keep = [_Arg(t) for t in (a, a_scales, b, b_scales, expert_ids, d)]
        o = GemmGroupedOpts(GROUPED_EPILOGUES[epilogue], int(a_scales_row_major))
        self._check(_lib.qf_gemm_fp8_blockscale_grouped(self._ctx, *(x.ptr() for x in keep), ctypes.byref(o)))

    def gemm_fp8_blockscale_masked(self, a, a_scales, b, b_scales, masked_m, d, epilogue="none",
                                   a_scales_row_major=False):
        """Masked MoE layout: a [E, max_m, K], masked_m [E] token counts on the device."""
        keep = [_Arg(t) for t in (a, a_scales, b, b_scales, masked_m, d)]
        o = GemmGroupedOpts(GROUPED_EPILOGUES[epilogue], int(a_scales_row_major))
        self._check(_lib.qf_gemm_fp8_blockscale_masked(self._ctx, *(x.ptr() for x in keep), ctypes.byref(o)))

    def quant_nvfp4(self, w, tensor_scale, codes, scales):
        """NVFP4 weight quantization (qf_quant_nvfp4): w [N, K] -> codes e2m1x2 [N, K] (uint8
        [N, K / 2] bytes, pass view(codes, "e2m1x2")), scales e4m3fn [N, K / 16]."""
        keep = [_Arg(t) for t in (w, tensor_scale, codes, scales)]
        self._check(_lib.qf_quant_nvfp4(self._ctx, *(x.ptr() for x in keep)))

    def nvfp4_pack(self, codes, packed):
        """The codes as stored into qf_gemm_nvfp4's layout (qf_nvfp4_pack), both e2m1x2 [N, K]."""
        keep = [_Arg(t) for t in (codes, packed)]
        self._check(_lib.qf_nvfp4_pack(self._ctx, *(x.ptr() for x in keep)))

    def gemm_nvfp4(self, a, b, b_scales, b_tensor_scale, d):
        """d [M, N] = a [M, K] . w^T with w in NVFP4: b packed e2m1x2 [N, K], b_scales e4m3fn
        [N, K / 16], b_tensor_scale fp32 [1] (qf_gemm_nvfp4)."""
        keep = [_Arg(t) for t in (a, b, b_scales, b_tensor_scale, d)]
        self._check(_lib.qf_gemm_nvfp4(self._ctx, *(x.ptr() for x in keep)))

    def gemm_scaled(self, a, a_scale, b, b_scale, d, bias=None, azp_adj=None, azp=None):
        keep = [_Arg(t) for t in (a, a_scale, b, b_scale, d)]
        opt = [_Arg(t) if t is not None else None for t in (bias, azp_adj, azp)]
        o = GemmScaledOpts(*(ctypes.pointer(t.tensor) if t else None for t in opt))
        self._check(_lib.qf_gemm_scaled(self._ctx, *(x.ptr() for x in keep), ctypes.byref(o)))

    @staticmethod
    def vq_format(preset=None, **fields):
        """A VqFormat from a preset name ("gptvq-2", "cq-2", "cq-4", "aqlm-3", "quip-4") and/or fields."""
        f = VqFormat()
        if preset is not None and _lib.qf_vq_format_preset(VQ_PRESETS[preset], ctypes.byref(f)):
            raise ValueError(f"unknown preset {preset!r}")
        for k, v in fields.items():
            setattr(f, k, DTYPES[v] if k == "entry_dtype" else VQ_LATTICES[v] if k == "lattice" else v)
        return f

    def vq_sizes(self, fmt, n, k):
        """Shapes to allocate: codes uint8 [R, n, row_bytes], codebooks [R, n_books, entries, vector_size]."""
        sz = VqSizes()
        self._check(_lib.qf_vq_sizes_of(self._ctx, ctypes.byref(fmt), n, k, ctypes.byref(sz)))
        return sz

    def vq_quantize(self, w, fmt, codes, codebooks, scales=None, iterations=0, seed=0, threads=0):
        """k-means codebooks, or the scaled E8P lattice where fmt.lattice says so (the "quip-4" preset);
        threads=0: one per CPU the process may run on (the same bytes for any count)."""
        keep = [_Arg(t) for t in (w, codes, codebooks)]
        sc = _Arg(scales) if scales is not None else None
        st = VqStats()
        o = VqQuantizeOpts(iterations, seed, threads)
        self._check(_lib.qf_vq_quantize(self._ctx, keep[0].ptr(), ctypes.byref(fmt), ctypes.byref(o), keep[1].ptr(),
                                        keep[2].ptr(), sc.ptr() if sc else None, ctypes.byref(st)))
        return st

    def vq_dequantize(self, codes, codebooks, fmt, w, scales=None):
        keep = [_Arg(t) for t in (codes, codebooks, w)]
        sc = _Arg(scales) if scales is not None else None
        self._check(_lib.qf_vq_dequantize(self._ctx, keep[0].ptr(), keep[1].ptr(), sc.ptr() if sc else None,
                                          ctypes.byref(fmt), keep[2].ptr()))

    def vq_encode(self, x, row0, codebooks, fmt, codes, scales=None):
        keep = [_Arg(t) for t in (x, codebooks, codes)]
        sc = _Arg(scales) if scales is not None else None
        self._check(_lib.qf_vq_encode(self._ctx, keep[0].ptr(), row0, keep[1].ptr(), ctypes.byref(fmt), keep[2].ptr(),
                                      sc.ptr() if sc else None))

    def vq_encode_slots(self, x, slots, codebooks, fmt, codes, scales=None):
        """qf_vq_encode_slots: row i of x into row slots[i] (int32 [T]; negative: skipped) of the
        cache's codes [R, N, row_bytes] (and scales [N])."""
        keep = [_Arg(t) for t in (x, slots, codebooks, codes)]
        sc = _Arg(scales) if scales is not None else None
        self._check(_lib.qf_vq_encode_slots(self._ctx, keep[0].ptr(), keep[1].ptr(), keep[2].ptr(), ctypes.byref(fmt),
                                            keep[3].ptr(), sc.ptr() if sc else None))

    def vq_encode_kv_slots(self, k_new, v_new, slots, k_books, v_books, fmt, k_codes, v_codes, k_scales=None,
                           v_scales=None):
        """qf_vq_encode_kv_slots: vq_encode_slots of k_new and of v_new (one shape) into their caches
        by the same slots, in one call."""
        keep = [_Arg(t) for t in (k_new, v_new, slots, k_books, v_books, k_codes, v_codes)]
        sc = [_Arg(t) if t is not None else None for t in (k_scales, v_scales)]
        self._check(_lib.qf_vq_encode_kv_slots(self._ctx, *(a.ptr() for a in keep[:5]), ctypes.byref(fmt), keep[5].ptr(),
                                               keep[6].ptr(), *(a.ptr() if a else None for a in sc)))

    def vq_gemm(self, x, codes, codebooks, fmt, y, scales=None):
        keep = [_Arg(t) for t in (x, codes, codebooks, y)]
        sc = _Arg(scales) if scales is not None else None
        self._check(_lib.qf_vq_gemm(self._ctx, keep[0].ptr(), keep[1].ptr(), keep[2].ptr(), sc.ptr() if sc else None,
                                    ctypes.byref(fmt), keep[3].ptr()))

    def vq_pack_gemv_shape(self, fmt, n, k):
        """Shape of the codes packed for the table GeMV: uint8 [R, ceil(n / 512), chunks, 512 * chunk bytes]."""
        shape = (ctypes.c_int64 * 4)()
        self._check(_lib.qf_vq_pack_gemv_shape(self._ctx, ctypes.byref(fmt), n, k, shape))
        return tuple(shape)

    def vq_pack_gemv(self, codes, fmt, k, packed):
        """packed = codes [R, N, row_bytes] in the table GeMV's layout; vq_gemm takes either."""
        keep = [_Arg(t) for t in (codes, packed)]
        self._check(_lib.qf_vq_pack_gemv(self._ctx, keep[0].ptr(), ctypes.byref(fmt), k, keep[1].ptr()))

    def vq_pack_attention_books(self, v_codebooks, fmt, head_dim, kv_heads, packed):
        """packed [1, kv_heads, 256, head_dim / vector_size, vector_size] = the V codebooks in the banked
        attention kernel's layout; vq_attention_decode takes it in place of v_codebooks."""
        keep = [_Arg(t) for t in (v_codebooks, packed)]
        self._check(_lib.qf_vq_pack_attention_books(self._ctx, keep[0].ptr(), ctypes.byref(fmt), head_dim, kv_heads,
                                                    keep[1].ptr()))

    def attention(self, q, k, v, o, lse=None, sinks=None, sm_scale=0.0, causal=False, window=0, k_scale=None,
                  v_scale=None):
        """o [B, Sq, Hq, Dv] = softmax attention of q [B, Sq, Hq, D] over k, v [B, Skv, Hkv, D / Dv];
        lse fp32 [B, Hq, Sq] and sinks fp32 [Hq] optional; k and v may be e4m3fn (view()) with
        k_scale, v_scale fp32 [Hkv] or [1] (qf_attention in qfuse.h)."""
        keep = [_Arg(t) for t in (q, k, v, o)]
        extra = [_Arg(t) if t is not None else None for t in (sinks, lse)]
        opt, _scales = _attention_opts(sm_scale, causal, window, k_scale, v_scale)
        self._check(_lib.qf_attention(self._ctx, keep[0].ptr(), keep[1].ptr(), keep[2].ptr(),
                                      extra[0].ptr() if extra[0] else None, ctypes.byref(opt), keep[3].ptr(),
                                      extra[1].ptr() if extra[1] else None))

    def attention_paged(self, q, k_cache, v_cache, block_table, kv_lens, o, lse=None, sinks=None, sm_scale=0.0,
                        causal=False, window=0, k_scale=None, v_scale=None):
        """qf_attention_paged: k_cache, v_cache [num_pages, page_size, Hkv, D]; block_table int32
        [B, max_pages]; kv_lens int32 [B]; the rest as attention()."""
        keep = [_Arg(t) for t in (q, k_cache, v_cache, block_table, kv_lens, o)]
        extra = [_Arg(t) if t is not None else None for t in (sinks, lse)]
        opt, _scales = _attention_opts(sm_scale, causal, window, k_scale, v_scale)
        self._check(_lib.qf_attention_paged(self._ctx, *(a.ptr() for a in keep[:5]), extra[0].ptr() if extra[0] else None,
                                            ctypes.byref(opt), keep[5].ptr(), extra[1].ptr() if extra[1] else None))

    def attention_varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, o, lse=None, sinks=None,
                         sm_scale=0.0, causal=False, window=0, k_scale=None, v_scale=None):
        """qf_attention_varlen: packed sequences, q [total_q, Hq, D], k, v [total_k, Hkv, D / Dv], o [total_q, Hq, Dv];
        cu_seqlens_q, cu_seqlens_k int32 [B + 1]; lse fp32 [Hq, total_q]; the rest as attention()."""
        keep = [_Arg(t) for t in (q, k, v, cu_seqlens_q, cu_seqlens_k, o)]
        extra = [_Arg(t) if t is not None else None for t in (sinks, lse)]
        opt, _scales = _attention_opts(sm_scale, causal, window, k_scale, v_scale)
        self._check(_lib.qf_attention_varlen(self._ctx, *(a.ptr() for a in keep[:5]), max_seqlen_q, max_seqlen_k,
                                             extra[0].ptr() if extra[0] else None, ctypes.byref(opt), keep[5].ptr(),
                                             extra[1].ptr() if extra[1] else None))

    def attention_paged_varlen(self, q, k_cache, v_cache, block_table, kv_lens, cu_seqlens_q, max_seqlen_q, o, lse=None,
                               sinks=None, sm_scale=0.0, causal=False, window=0, k_scale=None, v_scale=None):
        """qf_attention_paged_varlen: packed queries q [total_q, Hq, D] over a paged cache (as attention_paged);
        cu_seqlens_q int32 [B + 1]; o [total_q, Hq, Dv]; lse fp32 [Hq, total_q]."""
        keep = [_Arg(t) for t in (q, k_cache, v_cache, block_table, kv_lens, cu_seqlens_q, o)]
        extra = [_Arg(t) if t is not None else None for t in (sinks, lse)]
        opt, _scales = _attention_opts(sm_scale, causal, window, k_scale, v_scale)
        self._check(_lib.qf_attention_paged_varlen(self._ctx, *(a.ptr() for a in keep[:6]), max_seqlen_q,
                                                   extra[0].ptr() if extra[0] else None, ctypes.byref(opt),
                                                   keep[6].ptr(), extra[1].ptr() if extra[1] else None))

    def attention_cache_append(self, k_new, v_new, slots, k_cache, v_cache, k_scale=None, v_scale=None):
        """qf_attention_cache_append: k_new, v_new [T, Hkv, D / Dv] into the caches [num_pages, page_size,
        Hkv, D / Dv] at int32 slots [T] (negative: skipped); e4m3fn caches (view()) take k_scale, v_scale
        fp32 [Hkv] or [1]."""
        keep = [_Arg(t) for t in (k_new, v_new, slots, k_cache, v_cache)]
        scales = [_Arg(t) if t is not None else None for t in (k_scale, v_scale)]
        self._check(_lib.qf_attention_cache_append(self._ctx, *(a.ptr() for a in keep[:3]),
                                                   *(a.ptr() if a else None for a in scales), keep[3].ptr(),
                                                   keep[4].ptr()))

    def vq_attention_decode(self, q, k_codes, k_codebooks, v_codes, v_codebooks, fmt, o, lse, head_dim, kv_heads,
                            seq_len, sm_scale=0.0, kv_lens=None, block_table=None, page_size=0):
        """qf_vq_attention_decode; kv_lens: None (seq_len tokens per entry) or int32 [B], the
        tokens of each batch entry (read on the device under CUDA); block_table: None or int32
        [B, max_pages] of a paged cache whose codes are pages of page_size rows."""
        keep = [_Arg(t) for t in (q, k_codes, k_codebooks, v_codes, v_codebooks, o, lse)]
        opt, _extra = _vq_attention_opts(head_dim, kv_heads, seq_len, sm_scale, kv_lens, block_table, page_size)
        self._check(_lib.qf_vq_attention_decode(self._ctx, *(a.ptr() for a in keep[:5]), ctypes.byref(fmt),
                                                ctypes.byref(opt), keep[5].ptr(), keep[6].ptr()))

    def vq_attention_decode_append(self, q, k_new, v_new, k_codes, k_codebooks, v_codes, v_codebooks, fmt, o, lse,
                                   head_dim, kv_heads, seq_len, sm_scale=0.0, kv_lens=None, block_table=None,
                                   page_size=0):
        """qf_vq_attention_decode_append: a decode step in one call; k_new and v_new [B, Hkv * D] are
        appended as each entry's token L_b - 1 (kv_lens, or seq_len each), then the attention as
        vq_attention_decode."""
        keep = [_Arg(t) for t in (q, k_new, v_new, k_codes, k_codebooks, v_codes, v_codebooks, o, lse)]
        opt, _extra = _vq_attention_opts(head_dim, kv_heads, seq_len, sm_scale, kv_lens, block_table, page_size)
        self._check(_lib.qf_vq_attention_decode_append(self._ctx, *(a.ptr() for a in keep[:7]), ctypes.byref(fmt),
                                                       ctypes.byref(opt), keep[7].ptr(), keep[8].ptr()))

    def gemm_azp_adj(self, b, adj, multiplier=1):
        keep = [_Arg(t) for t in (b, adj)]
        self._check(_lib.qf_gemm_azp_adj(self._ctx, keep[0].ptr(), multiplier, keep[1].ptr()))
