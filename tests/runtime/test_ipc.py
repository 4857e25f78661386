"""fl tensors sent through torch.multiprocessing (integration/ipc.py): one device memory in both
processes with a plugin that has the IPC extension (fl_ipc.h), with CUDA IPC's lifetime rules; a
clear error, never a hang, with a plugin without it; CPU tensors are shared as before.  Each check
runs a script in a subprocess."""

# The reference plugin offers the extension: these scripts hide it, as a plugin without it.
WITHOUT_IPC = """
        from fl_runtime.integration import process
        for _index in range(torch_fl.device_count()):
            process.start().device(_index).plugin._fl_ipc = None
"""


def test_parent_and_spawned_child_share_one_tensor_and_its_block_lives_until_both_let_go(script):
    result = script("""
        import gc
        import torch, torch_fl
        import torch.multiprocessing as mp
        from fl_runtime.integration import process

        def child(q, done, go):
            t, view, param = q.get()
            t.add_(1)
            view.mul_(10)                     # a view: its offset travels with it
            torch.fl.synchronize()            # the parent sees what this process finished
            done.put((t.device.type, view.storage_offset(), type(param).__name__, param.requires_grad))
            go.get()
            del t, view, param
            gc.collect()
            torch.fl.ipc_collect()            # as torch.cuda.ipc_collect: freed blocks released now
            done.put("released")
            go.get()

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q, done, go = ctx.Queue(), ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=child, args=(q, done, go))
            p.start()
            t = torch.ones(6, device="fl")
            param = torch.nn.Parameter(torch.zeros(2, device="fl"))
            ptr = t.data_ptr()
            q.put((t, t[3:], param))
            print(done.get(timeout=180))
            print(t.cpu().tolist())
            allocator = process.start().allocators[0]
            del t
            gc.collect()
            allocator.settle()
            print("held while the child holds it:", ptr in allocator.live)
            go.put(1)
            print(done.get(timeout=60))
            torch.fl.ipc_collect()
            gc.collect()
            allocator.settle()
            print("held once both let go:", ptr in allocator.live)
            go.put(1)
            p.join(60)
            print("exit", p.exitcode)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-6:] == [
        "('fl', 3, 'Parameter', True)", "[2.0, 2.0, 2.0, 20.0, 20.0, 20.0]",
        "held while the child holds it: True", "released", "held once both let go: False", "exit 0"]


def test_a_received_tensor_cannot_be_sent_on(script):
    result = script("""
        import torch, torch_fl
        import torch.multiprocessing as mp

        def child(q, out):
            t = q.get()
            try:
                out.put(t)
            except Exception as exc:
                out.put((type(exc).__name__, str(exc)))

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q, out = ctx.Queue(), ctx.SimpleQueue()
            p = ctx.Process(target=child, args=(q, out))
            p.start()
            q.put(torch.ones(2, device="fl"))
            print(out.get())
            p.join(60)
    """)
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("('FLSharingError', ") and "cannot send an fl tensor" in last
    assert "received from another process" in last


def test_queue_put_of_an_fl_tensor_fails_in_the_consumer_instead_of_hanging(script):
    result = script("""
        import torch, torch_fl
        import torch.multiprocessing as mp

        def consumer(q, out):
            try:
                out.put(("got", q.get(timeout=120).tolist()))
            except Exception as exc:
                out.put((type(exc).__name__, str(exc)))

        if __name__ == "__main__":""" + WITHOUT_IPC.replace("        ", "            ", ) + """
            ctx = mp.get_context("spawn")
            q, out = ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=consumer, args=(q, out))
            p.start()
            q.put(torch.ones(2, device="fl"))
            print(out.get(timeout=180))
            q.put(torch.arange(3.0))               # a CPU tensor still goes through
            p.join(timeout=60)
            p2 = ctx.Process(target=consumer, args=(q, out))
            p2.start()
            print(out.get(timeout=180))
            p2.join(timeout=60)
    """)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()[-2:]
    assert first.startswith("('FLSharingError', ")
    assert "cannot send an fl tensor ((2,), torch.float32, fl:0)" in first
    assert "t.cpu()" in first and "has no inter-process memory" in first
    assert second == "('got', [0.0, 1.0, 2.0])"
    assert "cannot send an fl tensor" in result.stderr         # the sender says so too


def test_pipe_send_raises_at_the_call(script):
    result = script("""
        import torch, torch_fl
        import torch.multiprocessing as mp
        from fl_runtime.errors import FLSharingError
    """ + WITHOUT_IPC + """
        a, b = mp.Pipe()
        for obj in (torch.ones(2, device="fl:1"), torch.nn.Parameter(torch.ones(2, device="fl")),
                    torch.ones(2, device="fl").untyped_storage()):
            try:
                a.send(obj)
            except FLSharingError as exc:
                print("refused:", str(exc)[:40])
        a.send(torch.ones(2))
        print(b.recv().tolist())
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line[:len("refused: cannot send an fl tensor")] for line in lines[:2]] == \
        ["refused: cannot send an fl tensor"] * 2
    assert lines[2].startswith("refused: cannot send an fl storage")
    assert lines[3] == "[1.0, 1.0]"
