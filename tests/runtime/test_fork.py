"""torch.fl.init / is_initialized and the forked-child rule (integration/fork.py), as
torch.cuda has them: a child forked after the runtime started gets a clear error for any
fl use, keeps its CPU work (compared with the parent's), and the parent is unaffected."""


def test_init_and_is_initialized(fl):
    import torch
    torch.fl.init()
    torch.fl.init()          # idempotent
    assert torch.fl.is_initialized() and not torch.fl._is_in_bad_fork()


def test_forked_child_gets_a_clear_error_and_cpu_work_goes_on(python):
    result = python("""
        import os, torch, torch_fl
        from fl_runtime.errors import FLBadForkError
        x = torch.ones(3, device="fl")
        want = (torch.arange(4.0) * 2).tolist()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            lines = [f"bad={torch.fl._is_in_bad_fork()} init={torch.fl.is_initialized()} "
                     f"count={torch.fl.device_count()}"]
            torch.manual_seed(3)          # as in a DataLoader worker: skips fl, no error
            lines.append(f"cpu_same={(torch.arange(4.0) * 2).tolist() == want}")
            uses = {"new": lambda: torch.ones(2, device="fl"), "inherited": lambda: x.cpu(),
                    "op": lambda: x + 1, "init": torch.fl.init, "sync": torch.fl.synchronize,
                    "move": lambda: torch.ones(2).to("fl:1")}
            for name, use in uses.items():
                try:
                    use()
                    lines.append(f"{name}: no error")
                except FLBadForkError as exc:
                    lines.append(f"{name}: {'spawn' in str(exc) and 'forked subprocess' in str(exc)}")
            os.write(w, "\\n".join(lines).encode())
            os._exit(0)
        os.close(w)
        print(os.read(r, 100000).decode())
        os.waitpid(pid, 0)
        print("parent", (x + 1).cpu().tolist(), torch.fl.is_initialized())
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "bad=True init=False count=2"
    assert lines[1] == "cpu_same=True"
    assert lines[2:8] == [f"{name}: True" for name in ("new", "inherited", "op", "init", "sync", "move")]
    assert lines[8] == "parent [2.0, 2.0, 2.0] True"


def test_spawned_child_uses_fl(script):
    result = script("""
        import torch, torch_fl
        import torch.multiprocessing as mp

        def work(out):
            out.put((torch.arange(3.0, device="fl") * 2).cpu().tolist())

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            out = ctx.Queue()
            p = ctx.Process(target=work, args=(out,))
            p.start()
            print(out.get(timeout=180) == (torch.arange(3.0) * 2).tolist())
            p.join(timeout=60)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "True"


def test_fork_while_another_thread_allocates_never_hangs_the_child(python):
    """fork() copies the allocator's mutexes in whatever state other threads left them: a
    backward pass (allocations and frees in C++, without the GIL) and small uploads (their
    staging buffers held in C++) run in a loop while the main thread forks, and each child must
    still free what it inherited, read the allocator's and the upload holder's figures, get
    FLBadForkError for an op whose signature already has a C++ program and for an upload, and
    do CPU work (bridge/csrc/fork_handlers.h)."""
    result = python("""
        import faulthandler, os, sys, threading, time, torch, torch_fl
        from fl_runtime import bridge
        from fl_runtime.errors import FLBadForkError
        native = sys.modules.get("fl_runtime.bridge._fl_bridge")
        w = torch.ones(16, device="fl", requires_grad=True)
        x = torch.ones(16, device="fl")
        x + 1                                    # a signature the C++ path serves from now on
        stop = threading.Event()

        def churn():
            while not stop.is_set():
                y = w
                for i in range(300):
                    y = y * 1.0001 + w
                    if i % 10 == 0:
                        torch.full((8,), float(i)).to("fl")    # a staged upload: its holder's mutex
                y.sum().backward()
        thread = threading.Thread(target=churn)
        thread.start()
        outcomes, hung = {}, 0
        for _ in range(40):
            r, wr = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                faulthandler.dump_traceback_later(15, exit=True)    # a hang shows where, on stderr
                line = "op:"
                for op in (lambda: x + 1, lambda: torch.ones(4).to("fl")):
                    try:
                        op()
                        line += " no error"
                    except FLBadForkError:
                        line += " FLBadForkError"
                global_x = globals().pop("x")
                del global_x                     # frees the inherited block (C++ allocator)
                if native is not None:
                    native.figures(0)            # takes the allocator's mutex
                    native.pending_uploads(0)    # takes the upload holder's mutex
                line += f" cpu={(torch.arange(4.0) * 2).sum().item()}"
                os.write(wr, line.encode())
                os._exit(0)
            os.close(wr)
            deadline = time.monotonic() + 20
            while not (waited := os.waitpid(pid, os.WNOHANG))[0]:
                if time.monotonic() > deadline:
                    hung += 1
                    os.kill(pid, 9)
                    waited = os.waitpid(pid, 0)
                    break
                time.sleep(0.005)
            # a child that wrote nothing crashed or hung until faulthandler (its stderr is ours) ended it
            line = os.read(r, 1000).decode() or f"no line, wait status {waited[1]}"
            os.close(r)
            outcomes[line] = outcomes.get(line, 0) + 1
        stop.set()
        thread.join()
        print("hung", hung, "bridge", bridge.status().active)
        print(outcomes)
    """, timeout=600)
    assert result.returncode == 0, result.stderr
    summary, outcomes = result.stdout.strip().splitlines()[-2:]
    assert summary.startswith("hung 0 "), (summary, outcomes, result.stderr[-4000:])
    assert outcomes == str({"op: FLBadForkError FLBadForkError cpu=12.0": 40}), (outcomes, result.stderr[-4000:])
