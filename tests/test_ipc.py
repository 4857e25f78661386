"""fl tensors sent through torch.multiprocessing (integration/ipc.py): a clear error, never
a hang; CPU tensors are shared as before.  Each check runs a script in a subprocess."""


def test_queue_put_of_an_fl_tensor_fails_in_the_consumer_instead_of_hanging(script):
    result = script("""
        import torch, torch_fl
        import torch.multiprocessing as mp

        def consumer(q, out):
            try:
                out.put(("got", q.get(timeout=120).tolist()))
            except Exception as exc:
                out.put((type(exc).__name__, str(exc)))

        if __name__ == "__main__":
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
    assert first.startswith("('FLSharingError', 'cannot send an fl tensor ((2,), torch.float32, fl:0)")
    assert "t.cpu()" in first
    assert second == "('got', [0.0, 1.0, 2.0])"
    assert "cannot send an fl tensor" in result.stderr         # the sender says so too


def test_pipe_send_raises_at_the_call(script):
    result = script("""
        import torch, torch_fl
        import torch.multiprocessing as mp
        from fl_runtime.errors import FLSharingError
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
