"""PyTorch's OpenReg IPC tests, ported to fl: device tensors through torch.multiprocessing (spawn).

Source: pytorch/pytorch test/cpp_extensions/open_registration_extension/torch_openreg/tests/
test_ipc.py.  Each test keeps the original's name and intent; the device is "fl", shared through
the plugin's IPC extension (fl_ipc.h; integration/ipc.py).

Changed, with the reason:
- test_received_via_ipc_cannot_be_reshared: OpenReg calls UntypedStorage._share_device_(), a
  C++ sharing hook newer PyTorch has and 2.13 lacks; here the consumer sends the received tensor
  on through a pickler, which is what that hook serves, and gets FLSharingError (a RuntimeError)
  with the same words.
- the consumers also check the bytes are the producer's memory, not a copy (the original reads
  values only): each writes into the shared tensor and the producer reads the write.
"""
from __future__ import annotations

import multiprocessing

import pytest
import torch

_TIMEOUT_S = 240


def _producer_basic(queue, done, seen):
    t = torch.arange(1.0, 5.0, device="fl:0")
    queue.put(t)
    done.wait(timeout=_TIMEOUT_S)
    seen.put(t.cpu().tolist())          # the consumer's write, through one memory
    del t


def _consumer(queue, result_queue, done):
    """Reads the tensor it received, then writes its first element (the producer reads the write)."""
    t = queue.get()
    assert t.device.type == "fl", f"expected an fl tensor, got {t.device}"
    result = {"values": t.cpu().tolist(), "size": list(t.shape), "stride": list(t.stride()),
              "offset": t.storage_offset()}
    t[0] = 10.0
    torch.fl.synchronize()
    del t
    result_queue.put(result)
    done.set()


def _producer_offset(queue, done, seen):
    base = torch.arange(0.0, 8.0, device="fl:0")
    queue.put(base[4:])                 # storage_offset 4, values 4..7
    done.wait(timeout=_TIMEOUT_S)
    seen.put(base.cpu().tolist())
    del base


def _producer_strided(queue, done, seen):
    base = torch.arange(0.0, 8.0, device="fl:0")
    queue.put(base[::2])                # stride 2, values 0, 2, 4, 6
    done.wait(timeout=_TIMEOUT_S)
    seen.put(base.cpu().tolist())
    del base


def _consumer_reshare(queue, result_queue, done):
    from multiprocessing.reduction import ForkingPickler
    t = queue.get()
    try:
        ForkingPickler.dumps(t)
        result_queue.put(None)          # no error: the test fails on it
    except RuntimeError as exc:
        result_queue.put(str(exc))
    finally:
        del t
        done.set()


def _producer_limbo(queue, done):
    t = torch.arange(1.0, 5.0, device="fl:0")
    queue.put(t)
    done.wait(timeout=_TIMEOUT_S)
    del t                               # the consumer still holds it: the sender keeps the block


def _consumer_limbo(queue, done):
    t = queue.get()
    done.set()                          # before letting go, so the producer exits first
    del t


def _run(producer, consumer):
    """One producer and one consumer process, as the original; (consumer's result, what the
    producer's tensor holds after the consumer let go, or None)."""
    ctx = multiprocessing.get_context("spawn")
    queue, result_queue, seen, done = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Event()
    prod = ctx.Process(target=producer, args=(queue, done, seen))
    cons = ctx.Process(target=consumer, args=(queue, result_queue, done))
    prod.start()
    cons.start()
    result = result_queue.get(timeout=_TIMEOUT_S)
    after = seen.get(timeout=_TIMEOUT_S)
    prod.join(timeout=_TIMEOUT_S)
    cons.join(timeout=_TIMEOUT_S)
    assert not prod.is_alive() and not cons.is_alive(), "a process hung"
    assert (prod.exitcode, cons.exitcode) == (0, 0)
    return result, after


@pytest.fixture(autouse=True)
def on_fl(fl):
    yield


def test_basic_tensor_roundtrip():
    result, after = _run(_producer_basic, _consumer)
    assert result["values"] == [1.0, 2.0, 3.0, 4.0]
    assert after == [10.0, 2.0, 3.0, 4.0]


def test_offset_tensor_roundtrip():
    result, after = _run(_producer_offset, _consumer)
    assert result["values"] == [4.0, 5.0, 6.0, 7.0] and result["offset"] == 4
    assert after == [0.0, 1.0, 2.0, 3.0, 10.0, 5.0, 6.0, 7.0]


def test_strided_tensor_roundtrip():
    result, after = _run(_producer_strided, _consumer)
    assert result == {"values": [0.0, 2.0, 4.0, 6.0], "size": [4], "stride": [2], "offset": 0}
    assert after == [10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def test_received_via_ipc_cannot_be_reshared():
    result, _ = _run(_producer_basic, _consumer_reshare)
    assert result is not None, "expected FLSharingError, no error was raised"
    assert "received from another process" in result


def test_producer_exits_cleanly_with_tensor_in_limbo():
    ctx = multiprocessing.get_context("spawn")
    queue, done = ctx.Queue(), ctx.Event()
    prod = ctx.Process(target=_producer_limbo, args=(queue, done))
    cons = ctx.Process(target=_consumer_limbo, args=(queue, done))
    prod.start()
    cons.start()
    prod.join(timeout=_TIMEOUT_S)
    cons.join(timeout=_TIMEOUT_S)
    assert not prod.is_alive() and not cons.is_alive(), "a process hung"
    assert (prod.exitcode, cons.exitcode) == (0, 0)
