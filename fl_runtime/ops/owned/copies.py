"""copy_ for fl tensors: host<->fl, fl:i->fl:j in one plugin, and across plugins.

Every copy is ordered after the pending writes on the streams that produced
its source (docs/users/devices.md): the runtime tracks the last writer stream per block.
A copy from the host must not read the caller's buffer after copy_ returns (it may
change at once): a small one (up to STAGE_BYTES) is staged in a host copy the runtime
owns and enqueued without waiting, its staging buffer kept until the device has read
it (devices/uploads.py), as are the runtime's own temporaries; a large one from the
caller's memory waits for its stream.  Copies to the host wait for the data by definition.
Converting or strided copies on a device use the vendor's `copy_` kernel; a
vendor without one gets them through the host (a CPU fallback, counted).
With the native bridge, a copy on one device that the vendor's copy_ kernel took is served
in C++ from its call signature's second call on (_launched_program; docs/users/native-bridge.md
"Eager ops"), _to_copy is C++ making the same empty_like + copy_ (bridge/csrc/to_copy_kernel.h),
and so are the raw host copies: a dense same-dtype download (_raw_d2h) and a small staged upload
(_raw_h2d with its stage held, bridge/csrc/host_copies.h); every other copy stays here.
"""
from __future__ import annotations

import functools
import warnings

import torch

from fl_runtime.abi import ffi
from fl_runtime.devices.storage import storage_base
from fl_runtime.logs import logger
from fl_runtime.ops import accounting
from fl_runtime.ops.boundary import leaves_runtime

# Host-to-device copies up to this size are staged (one host memcpy) instead of waiting for the
# stream, which would also wait for every kernel queued before the copy (module docstring).
STAGE_BYTES = 1 << 16


def register(library: torch.library.Library, rt, pinned_memory: bool = False,
             bridge_off: tuple[str, str] = ("", "")) -> None:
    """The runtime's copy kernels; `pinned_memory`: PyTorch has a pinned host allocator for fl
    (the native bridge), so its own _pin_memory stays (else _pin_memory below answers, and its
    warning names `bridge_off`: why the bridge is off and what to do)."""
    global _bridge_off
    _bridge_off = bridge_off
    def copy_(self, src, non_blocking=False):
        route = _route(self, src)
        if route is not None:
            route(rt, self, src)
        return self

    rt.launcher.register_owned(library, "copy_", copy_,
                               lambda args, kwargs: _launched_program(rt, *args, **kwargs))
    native = rt.launcher.native
    register_to_copy(library, native)
    if native is not None:
        # The raw host copies in C++ too (bridge/csrc/host_copies.h), with this file's constant
        # and one upload holder per device (uploads.py attach_native, first: the C++ copies hold
        # their stages there); its error path raises what plugin.check raises here.
        rt.uploads.attach_native(native)
        native.configure_host_copies(STAGE_BYTES, functools.partial(_native_copy_failure, rt))
    if not pinned_memory:
        library.impl("_pin_memory", _pin_memory, "CPU")


def register_to_copy(library: torch.library.Library, native, schema: str | None = None) -> str:
    """_to_copy's PrivateUse1 kernel: the bridge's C++ one (the same empty_like + copy_,
    bridge/csrc/to_copy_kernel.h) where there is a bridge and it reads this torch's _to_copy
    schema (`schema`: a stand-in for it, for tests), else _to_copy below.  Returns why C++ does
    not serve it ("" when it does)."""
    why = "the native bridge is off" if native is None else native.register_to_copy(leaves_runtime(_to_copy), schema)
    if why:
        if native is not None:
            logger.debug("_to_copy stays in Python: %s", why)
        library.impl("_to_copy", _to_copy, "PrivateUse1")
    return why


def _route(dst: torch.Tensor, src: torch.Tensor):
    """The way copy_ takes dst.copy_(src): one of the functions below, called (rt, dst, src);
    None without elements.  copy_ and _launched_program both ask here, so the copies the
    bridge replays in C++ are exactly those this routing gives _on_device."""
    if dst.numel() == 0:
        return None
    if _has_view_bits(src) or _has_view_bits(dst):
        return _copy_lazy_views
    if src.device.type == "cpu":
        return _host_to_device
    if dst.device.type == "cpu":
        return _to_host
    if src.device.index == dst.device.index:
        return _on_device
    return _across_devices


def _launched_program(rt, self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False):
    """The launch program copy_ above made for this call, as the bridge's C++ kernel replays it
    (Launcher.register_owned), or None.  Only a copy routed _on_device whose vendor has a copy_
    kernel launches one.  Its launch is launch("copy_", (self, src)) whatever `non_blocking`,
    so its program is that call's (recorded under the same layouts by any caller of that
    launch: a program depends on the call key alone, fast_path.py)."""
    if _route(self, src) is not _on_device or not _device_kernel_copies(rt, self):
        return None
    return rt.launcher.native_program("copy_", (self, src), {})


def _to_copy(self: torch.Tensor, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None) -> torch.Tensor:
    """Tensor.to / .cpu() / .double() of an fl tensor: PyTorch's own _to_copy, except that
    non_blocking=True to the CPU does not ask for a pinned host buffer (PyTorch's version does,
    through PrivateUse1 hooks a Python backend cannot provide, and raises NotImplementedError).
    A copy to the host is synchronous here anyway (module docstring), so the values are final
    when this returns, which is all non_blocking promises."""
    if layout not in (None, torch.strided):
        raise RuntimeError(f"_to_copy: fl tensors are strided only, cannot make a {layout} tensor")
    out = torch.empty_like(self, dtype=dtype, device=device, pin_memory=bool(pin_memory),
                           memory_format=memory_format or torch.preserve_format)
    return out.copy_(self, non_blocking=non_blocking and out.device.type != "cpu")


def _pin_memory(self: torch.Tensor, device=None) -> torch.Tensor:
    """tensor.pin_memory() / DataLoader(pin_memory=True) with fl as the accelerator.

    PyTorch asks the PrivateUse1 hooks for a pinned allocator, which only C++ can
    register (RegisterPrivateUse1HooksInterface), and the fl ABI has no page-locked
    host memory: a copy from the host never reads the caller's buffer after it returns
    (module docstring), so pinning would gain nothing.
    This returns an ordinary (pageable) copy, as pin_memory() would, so that code
    asking for pinning runs unchanged; is_pinned() stays False, truthfully; the one warning
    names why the bridge is off and the fix.  torch.empty(..., pin_memory=True) still raises
    PyTorch's NotImplementedError: that factory asks the hooks for the allocator inside
    PyTorch's C++, with no op or Python call to take its place (docs/users/native-bridge.md)."""
    global _pin_warned
    if not _pin_warned:
        _pin_warned = True
        warnings.warn(f"torch_fl: pinned host memory needs the native bridge, which is off ({_bridge_off[0]}); "
                      f"pin_memory() returns an ordinary CPU copy (host-to-device copies stay correct); "
                      f"{_bridge_off[1]}", stacklevel=3)
    return self.clone()


_pin_warned = False     # one warning per process

_bridge_off = ("", "")  # (why the native bridge is off, what to do), from register()


def _native_copy_failure(rt, device_index: int, status: int, call: str) -> None:
    """What the bridge's C++ host copies raise for a failed vendor call: plugin.check's error,
    as _raw_h2d / _raw_d2h / uploads.py raise it for the same call."""
    rt.device(device_index).plugin.check(status, call)


def _ensure_cpu_allowed(rt, device_index: int) -> None:
    """Raise UnsupportedOpError when the config or TORCH_FL_STRICT forbids the host
    round trip a copy is about to take (the CPU fallback's switches)."""
    rt.launcher.chain.check_cpu_allowed("aten::copy_", device_index, "the vendor has no kernel for it")


def _has_view_bits(t: torch.Tensor) -> bool:
    """A lazy conjugate / negative view (conj(), and views of it): its bytes are not its values."""
    return t.is_conj() or t.is_neg()


def _stored(t: torch.Tensor) -> torch.Tensor:
    """The same memory without the conj / neg bits: a view of the bytes as they are
    (each bit toggled off by a view that moves no data)."""
    return _with_bits_of(t, t)


def _copy_lazy_views(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    """copy_ where either side is a lazy conj/neg view (complex tensors; the chip has
    no kernel that applies the bits).  The bytes move without the bits (plain copies,
    which cannot come back here) and the bits are applied on the host: copying the
    bytes as if they were the values would silently drop the conjugation, and
    materialising the view on the device would need a copy_ that needs this one."""
    value = _stored(src)
    if src.device.type != "cpu":
        value = value.cpu()
    value = _with_bits_of(value, src)                # src's values, on the host
    if dst.device.type == "cpu":
        dst.copy_(value)
        return
    _ensure_cpu_allowed(rt, dst.device.index)
    accounting.record("aten::copy_", accounting.CPU)
    _stored(dst).copy_(_with_bits_of(value, dst).resolve_conj().resolve_neg())


def resolve_conj_on_device(t: torch.Tensor) -> torch.Tensor:
    """t.resolve_conj() for a conjugate view on an fl device, made there: the stored bytes
    copied as real (view_as_real) and the imaginary halves negated, with the vendor's
    real-dtype copy and mul_ kernels (or their fallbacks).  For the launcher, which
    must hand kernels physical values (fl_abi.h, fl_tensor); resolve_conj() itself
    would take _copy_lazy_views' host round trip.  A view that also has the negative
    bit takes that round trip."""
    if t.is_neg() or t.device.type == "cpu":
        return t.resolve_conj().resolve_neg()
    stored = _stored(t)
    out = torch.empty_like(stored)
    real = torch.view_as_real(out)
    real.copy_(torch.view_as_real(stored))
    real[..., 1].mul_(-1)                # conj(x + iy) = x - iy; -0.0 for y = 0, as PyTorch's conj
    return out


def _with_bits_of(host: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`host` read through `like`'s lazy bits: conj() and _neg_view() toggle the bit
    (a view), so applying a tensor's own bits to it clears them."""
    if like.is_conj():
        host = host.conj()
    if like.is_neg():
        host = torch._neg_view(host)
    return host


def _raw_h2d(rt, dst: torch.Tensor, host: torch.Tensor, whole_storage: bool = False, owned: bool = False) -> None:
    """Bytes of a contiguous host tensor into dst's region (or its whole storage).  `owned`:
    nobody but the runtime holds `host`, so the copy need not be waited for (rt.uploads
    keeps `host` until the device has read it); otherwise the stream is synchronised."""
    device = rt.device(dst.device.index)
    stream = rt.streams.current(device.index)
    rt.order_after_writers(device.index, stream, (), (dst,))
    offset = 0 if whole_storage else dst.storage_offset() * dst.element_size()
    nbytes = host.numel() * host.element_size()
    status = device.plugin.api.memcpy_h2d_async(stream.handle, storage_base(dst), offset,
                                                ffi.cast("void*", host.data_ptr()), nbytes)
    device.plugin.check(status, f"memcpy_h2d_async(fl:{device.index}, {nbytes} bytes)")
    if owned:
        rt.uploads.hold(device, stream, host)
    else:
        stream.synchronize()   # `host` may be freed or changed as soon as we return


def _raw_d2h(rt, host: torch.Tensor, src: torch.Tensor, whole_storage: bool = False) -> None:
    """Bytes of src's region (or its whole storage) into a contiguous host tensor."""
    device = rt.device(src.device.index)
    stream = rt.streams.current(device.index)
    rt.order_after_writers(device.index, stream, (src,), ())
    offset = 0 if whole_storage else src.storage_offset() * src.element_size()
    nbytes = host.numel() * host.element_size()
    if nbytes:
        status = device.plugin.api.memcpy_d2h_async(stream.handle, ffi.cast("void*", host.data_ptr()),
                                                    storage_base(src), offset, nbytes)
        device.plugin.check(status, f"memcpy_d2h_async(fl:{device.index}, {nbytes} bytes)")
        stream.synchronize()


def _host_to_device(rt, dst: torch.Tensor, src: torch.Tensor, src_owned: bool = False) -> None:
    """dst.copy_(src) for a CPU `src`; `src_owned`: a temporary of the runtime's (no caller holds it)."""
    host = src.to(dtype=dst.dtype).expand(dst.shape).contiguous()
    owned = src_owned or not _same_memory(host, src)     # a converted or densified copy is ours
    if not owned and host.numel() * host.element_size() <= STAGE_BYTES:
        host, owned = host.clone(), True                  # staged: the caller may reuse src at once
    if dst.is_contiguous():
        _raw_h2d(rt, dst, host, owned=owned)
    elif rt.launcher.has_kernel(dst.device.index, "copy_", dst.dtype):
        staged = rt.new_like_contiguous(dst)
        _raw_h2d(rt, staged, host, owned=owned)
        rt.launcher.launch("copy_", (dst, staged), {})
    else:
        _write_via_host(rt, dst, host)


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def copy_to_host(rt, src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy an fl tensor into a CPU tensor (any dtype/strides/broadcast on the CPU side)."""
    if not src.is_contiguous():
        if rt.launcher.has_kernel(src.device.index, "copy_", src.dtype):
            src = src.contiguous()
        else:
            dst.copy_(_read_via_host(rt, src))
            return
    direct = dst.dtype == src.dtype and dst.shape == src.shape and dst.is_contiguous()
    host = dst if direct else torch.empty(src.shape, dtype=src.dtype)
    _raw_d2h(rt, host, src)
    if not direct:
        dst.copy_(host)


def _read_via_host(rt, src: torch.Tensor) -> torch.Tensor:
    """A CPU copy of a strided fl tensor, by reading its whole storage."""
    raw = torch.empty(src.untyped_storage().nbytes(), dtype=torch.uint8)
    _raw_d2h(rt, raw, src, whole_storage=True)
    return raw.view(src.dtype).as_strided(src.shape, src.stride(), src.storage_offset()).clone()


def _write_via_host(rt, dst: torch.Tensor, host: torch.Tensor) -> None:
    """dst[...] = host for a strided dst when the vendor has no copy_ kernel:
    read the storage, write on the host, write the storage back."""
    _ensure_cpu_allowed(rt, dst.device.index)
    accounting.record("aten::copy_", accounting.CPU)
    raw = torch.empty(dst.untyped_storage().nbytes(), dtype=torch.uint8)
    _raw_d2h(rt, raw, dst, whole_storage=True)
    raw.view(dst.dtype).as_strided(dst.shape, dst.stride(), dst.storage_offset()).copy_(host)
    _raw_h2d(rt, dst, raw, whole_storage=True, owned=True)


def _to_host(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    rt.copy_to_host(src, dst)


def _device_kernel_copies(rt, dst: torch.Tensor) -> bool:
    """The vendor's copy_ kernel takes a copy on dst's device (else _on_device goes around it)."""
    return rt.launcher.has_kernel(dst.device.index, "copy_", dst.dtype)


def _on_device(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    if _device_kernel_copies(rt, dst):
        rt.launcher.launch("copy_", (dst, src), {})
    elif dst.dtype == src.dtype and dst.shape == src.shape and dst.is_contiguous() and src.is_contiguous():
        _raw_device_copy(rt, dst, src)
    else:
        _ensure_cpu_allowed(rt, dst.device.index)
        _host_to_device(rt, dst, src.cpu(), src_owned=True)


def _across_devices(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    src_dev, dst_dev = rt.device(src.device.index), rt.device(dst.device.index)
    if src_dev.plugin is not dst_dev.plugin:
        _host_to_device(rt, dst, src.cpu(), src_owned=True)    # different vendors share no memory: stage on the host
        return
    dense = src if (src.is_contiguous() and src.dtype == dst.dtype and src.shape == dst.shape) \
        else src.to(dst.dtype).expand(dst.shape).contiguous()
    target = dst if dst.is_contiguous() else rt.new_like_contiguous(dst)
    _raw_device_copy(rt, target, dense)
    if target is not dst:
        _on_device(rt, dst, target)


def _raw_device_copy(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    """memcpy_d2d of two dense, same-dtype, same-shape tensors (device_bytes_copy), after the
    writes to src on its device's other streams."""
    src_index = src.device.index
    rt.order_after_writers(src_index, rt.streams.current(src_index), (src,), ())
    dst_stream = device_bytes_copy(rt, (dst.device.index, storage_base(dst), dst.storage_offset() * dst.element_size()),
                                   (src_index, storage_base(src), src.storage_offset() * src.element_size()),
                                   src.numel() * src.element_size())
    rt.mark_written(dst, dst_stream)


def device_bytes_copy(rt, dst: tuple[int, int, int], src: tuple[int, int, int], nbytes: int):
    """memcpy_d2d_async of `nbytes` from src to dst, each (device index, storage address, byte
    offset), on the source device's current stream, so after everything enqueued there (the
    writes that produced src), and ordered both ways against the destination's current
    stream: earlier work there may still read the target, later work must see the copy.
    Returns the destination's stream.  Also c10::Allocator::copy_data's (bridge/calls.py)."""
    (dst_index, dst_base, dst_offset), (src_index, src_base, src_offset) = dst, src
    src_dev = rt.device(src_index)
    src_stream, dst_stream = rt.streams.current(src_index), rt.streams.current(dst_index)
    if dst_stream is not src_stream:
        rt.note_cross_stream()
        src_stream.wait_stream(dst_stream)
    status = src_dev.plugin.api.memcpy_d2d_async(src_stream.handle, rt.device(dst_index).local_index, dst_base,
                                                 dst_offset, src_dev.local_index, src_base, src_offset, nbytes)
    src_dev.plugin.check(status, f"memcpy_d2d_async(fl:{src_index} -> fl:{dst_index}, {nbytes} bytes)")
    if dst_stream is not src_stream:
        dst_stream.wait_stream(src_stream)
    return dst_stream
