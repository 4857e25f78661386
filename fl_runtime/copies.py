"""copy_ for fl tensors: host<->fl, fl:i->fl:j in one plugin, and across plugins.

Every copy is ordered after the pending writes on the streams that produced
its source (F6, F18): the runtime tracks the last writer stream per block.
Copies from the host are synchronous (the host buffer may change right after
copy_ returns); copies to the host wait for the data by definition.
Converting or strided copies on a device use the vendor's `copy_` kernel; a
vendor without one gets them through the host (a CPU fallback, counted).
"""
from __future__ import annotations

import torch

from . import op_stats
from .abi import ffi
from .fallback import ensure_cpu_fallback_allowed
from .storage import storage_base


def register(library: torch.library.Library, rt) -> None:
    def copy_(self, src, non_blocking=False):
        if self.numel() == 0:
            return self
        if src.device.type == "cpu":
            _host_to_device(rt, self, src)
        elif self.device.type == "cpu":
            rt.copy_to_host(src, self)
        elif src.device.index == self.device.index:
            _on_device(rt, self, src)
        else:
            _across_devices(rt, self, src)
        return self

    library.impl("copy_", copy_, "PrivateUse1")


def _raw_h2d(rt, dst: torch.Tensor, host: torch.Tensor, whole_storage: bool = False) -> None:
    """Bytes of a contiguous host tensor into dst's region (or its whole storage)."""
    device = rt.device(dst.device.index)
    stream = rt.streams.current(device.index)
    rt.order_after_writers(device.index, stream, (), (dst,))
    offset = 0 if whole_storage else dst.storage_offset() * dst.element_size()
    nbytes = host.numel() * host.element_size()
    status = device.plugin.api.memcpy_h2d_async(stream.handle, storage_base(dst), offset,
                                                ffi.cast("void*", host.data_ptr()), nbytes)
    device.plugin.check(status, f"memcpy_h2d_async(fl:{device.index}, {nbytes} bytes)")
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


def _host_to_device(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    host = src.to(dtype=dst.dtype).expand(dst.shape).contiguous()
    if dst.is_contiguous():
        _raw_h2d(rt, dst, host)
    elif rt.launcher.has_kernel(dst.device.index, "copy_", dst.dtype):
        staged = rt.new_like_contiguous(dst)
        _raw_h2d(rt, staged, host)
        rt.launcher.launch("copy_", (dst, staged), {})
    else:
        _write_via_host(rt, dst, host)


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
    ensure_cpu_fallback_allowed("aten::copy_", dst.device.index)
    op_stats.record("aten::copy_", op_stats.CPU)
    raw = torch.empty(dst.untyped_storage().nbytes(), dtype=torch.uint8)
    _raw_d2h(rt, raw, dst, whole_storage=True)
    raw.view(dst.dtype).as_strided(dst.shape, dst.stride(), dst.storage_offset()).copy_(host)
    _raw_h2d(rt, dst, raw, whole_storage=True)


def _on_device(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    if rt.launcher.has_kernel(dst.device.index, "copy_", dst.dtype):
        rt.launcher.launch("copy_", (dst, src), {})
    elif dst.dtype == src.dtype and dst.shape == src.shape and dst.is_contiguous() and src.is_contiguous():
        _raw_device_copy(rt, dst, src)
    else:
        ensure_cpu_fallback_allowed("aten::copy_", dst.device.index)
        _host_to_device(rt, dst, src.cpu())


def _across_devices(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    src_dev, dst_dev = rt.device(src.device.index), rt.device(dst.device.index)
    if src_dev.plugin is not dst_dev.plugin:
        _host_to_device(rt, dst, src.cpu())    # different vendors share no memory: stage on the host
        return
    dense = src if (src.is_contiguous() and src.dtype == dst.dtype and src.shape == dst.shape) \
        else src.to(dst.dtype).expand(dst.shape).contiguous()
    target = dst if dst.is_contiguous() else rt.new_like_contiguous(dst)
    _raw_device_copy(rt, target, dense)
    if target is not dst:
        _on_device(rt, dst, target)


def _raw_device_copy(rt, dst: torch.Tensor, src: torch.Tensor) -> None:
    """memcpy_d2d of two dense, same-dtype, same-shape tensors, on the source's stream,
    ordered both ways against the destination's stream."""
    src_index, dst_index = src.device.index, dst.device.index
    src_dev = rt.device(src_index)
    src_stream = rt.streams.current(src_index)
    dst_stream = rt.streams.current(dst_index)
    rt.order_after_writers(src_index, src_stream, (src,), ())
    if dst_stream is not src_stream:
        rt.note_cross_stream()
        src_stream.wait_stream(dst_stream)      # earlier work on dst may still read the target
    nbytes = src.numel() * src.element_size()
    status = src_dev.plugin.api.memcpy_d2d_async(
        src_stream.handle, rt.device(dst_index).local_index, storage_base(dst),
        dst.storage_offset() * dst.element_size(), src_dev.local_index, storage_base(src),
        src.storage_offset() * src.element_size(), nbytes)
    src_dev.plugin.check(status, f"memcpy_d2d_async(fl:{src_index} -> fl:{dst_index}, {nbytes} bytes)")
    if dst_stream is not src_stream:
        dst_stream.wait_stream(src_stream)      # later work on dst sees the copied data
    rt.mark_written(dst, dst_stream)
