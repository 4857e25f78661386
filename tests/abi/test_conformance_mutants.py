"""The conformance suite catches broken plugins: mutants of the reference vendor.

Each mutant is a copy of reference_vendor/ with one C line changed, built with
`fl-sdk build`; the suite (restricted with -k to the area under test plus
neighbours that must still pass) must exit non-zero and blame the right
category and kernel.  FL_REFERENCE_SOURCE may point at another copy of the
reference vendor's sources (e.g. a `git archive` of HEAD while the working
tree is mid-edit).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from test_conformance_reference import REFERENCE_LIBRARY, ROOT, failures, read_reports, run_fl_sdk_test

SOURCE = Path(os.environ.get("FL_REFERENCE_SOURCE", ROOT / "reference_vendor"))


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    line: str                  # must occur exactly once in `file`
    replacement: str
    keyword: str               # -k: the area under test and neighbours that must still pass
    category: str              # where every failure must be
    blamed: set = field(default_factory=set)   # the ops (kernels) or tests the failures must name
    says: str = ""             # a failure message must contain this
    variant: str = ""          # every failure must be in this kernel variant
    options: tuple = ()        # more `fl-sdk test` options
    more: tuple = ()           # further (line, replacement) pairs in `file`
    # A race the suite's probe meets by chance (stream_probes: the reference vendor once failed
    # 452 of 3,000 tries) can slip through one run on a loaded machine: the suite gets this many
    # runs and must catch the mutant in one of them, blaming it as below.
    suite_runs: int = 1


MUTANTS = [
    # fl_abi.h "ARGUMENTS THAT SHARE MEMORY": conformance.overlap's cases read a source the copy overwrote.
    Mutant("copy-ignores-overlap", "src/kernels/copy.c",
           "    if (flk_may_overlap(dst, s)) {",
           "    if (0 && flk_may_overlap(dst, s)) {",
           "(copy_ or fill_.Scalar) and float32", "kernels", {"copy_"}, "out of tolerance"),
    Mutant("integer-sum-skips-last-element", "src/kernels/reduce.c",
           "            for (int64_t i = 0; i < n; ++i)\n                s += (uint64_t)flk_load_i64(",
           "            for (int64_t i = 0; i < n - 1; ++i)\n                s += (uint64_t)flk_load_i64(",
           "(sum- or sum.dim or mean- or mean.dim) and (int64 or float32) and not cumsum", "kernels", {"sum", "sum.dim_IntList", "mean", "mean.dim"}),
    Mutant("malloc-ignores-requested-alignment", "src/driver/memory.c",
           "    uint64_t align = alignment > dev->alignment ? alignment : dev->alignment;",
           "    uint64_t align = dev->alignment;",
           # (the IPC extension's check allocates at the requested alignment too: it fails as well)
           "suite_abi or suite_memory", "memory", {"test_malloc_honours_alignment_and_never_overlaps",
                                                   "test_ipc_handle_covers_the_allocation_and_reopens_in_this_process"},
           "not a multiple of"),
    Mutant("neg-kernel-segfaults", "src/kernels/unary_math.c",
           "FLK_DEF1_F(l_neg, FLK_NOSETUP, -a)",
           "FLK_DEF1_F(l_neg, FLK_NOSETUP, -a + *(volatile T *)(uintptr_t)(a == a ? 0 : 0))",
           # (not the concurrency check, whose lone runs of neg crash the same way)
           "(neg- or neg_- or exp-) and not suite_concurrency", "kernels", {"neg", "neg_"}, "SIGSEGV"),
    Mutant("stream-wait-event-ignored", "src/driver/event.c",
           "    if (done) /* never recorded, or already complete: nothing to wait for */",
           "    if (done || 1) /* never recorded, or already complete: nothing to wait for */",
           # The deterministic probe, not the state machine: that one sees the missing wait
           # only when timing allows, and then shrinks a flaky failure for minutes.
           "stream_wait_event_orders or fifo_order", "streams",
           {"test_stream_wait_event_orders_work_behind_busy_stream"}, "stream_wait_event did not make B wait"),
    Mutant("stream-runs-newest-work-first", "src/driver/queue.c",
           "        drv_task t = q->ring[q->head & (q->cap - 1)];",
           "        drv_task t = q->ring[(q->tail - 1) & (q->cap - 1)];\n"
           "        q->ring[(q->tail - 1) & (q->cap - 1)] = q->ring[q->head & (q->cap - 1)];",
           "fifo_order or entry_symbol", "streams", {"test_one_stream_runs_work_in_fifo_order"},
           "did not run its work in FIFO order"),
    Mutant("event-elapsed-time-negated", "src/driver/event.c",
           "    *ms = (float)(((double)t1 - (double)t0) / 1e6);",
           "    *ms = (float)(((double)t0 - (double)t1) / 1e6);",
           "elapsed_time_matches or fifo_order", "streams", {"test_event_elapsed_time_matches_the_work"},
           "event_elapsed_ms around"),
    Mutant("free-leaks-memory", "src/driver/memory.c",
           "    dev->free_bytes += b->size;\n    punch_hole(dev, b);",
           "    punch_hole(dev, b);",
           # The leaked bytes also run the device out of memory early, which the OOM test sees.
           "suite_memory", "memory", {"test_memory_info_returns_to_baseline",
                                      "test_out_of_memory_is_a_status_not_a_crash"}),
    Mutant("free-reports-wrong-status", "src/driver/memory.c",
           "        return fld_fail(FL_ERROR_INVALID_POINTER,\n                        \"fl_free(device=%d",
           "        return fld_fail(FL_ERROR_INVALID_VALUE,\n                        \"fl_free(device=%d",
           "test_bad_argument_status and free", "abi",
           {f"test_bad_argument_status[{case}]" for case in ("free-twice", "free-interior-pointer",
                                                              "free-foreign-pointer", "free-zero")},
           "FL_ERROR_INVALID_VALUE"),
    Mutant("memset-wrong-at-odd-addresses", "src/driver/queue.c",
           "        memset(t->u.set.dst, t->u.set.value, t->u.set.size);",
           "        memset((char *)((uintptr_t)t->u.set.dst & ~(uintptr_t)1), t->u.set.value, t->u.set.size);",
           "memset_is_byte_exact or copies_round_trip", "memory", {"test_memset_is_byte_exact_at_odd_offsets"}),
    Mutant("max-ignores-strides", "src/kernels/reduce.c",
           "    for (int d = 0; d < in->ndim; ++d)\n        strides[0][d] = in->strides[d] * es;\n"
           "    char *p = (char *)flk_data(in);",
           "    for (int d = in->ndim - 1, run = (int)es; d >= 0; run *= (int)in->sizes[d--])\n"
           "        strides[0][d] = run;\n    char *p = (char *)flk_data(in);",
           "max- or min-", "kernels", {"max", "min"}),
    Mutant("max-ignores-storage-offset", "src/kernels/reduce.c",
           "    char *p = (char *)flk_data(in);\n    flk_for_each_row(in->ndim, in->sizes, 1, &p, strides, 0, "
           "minmax_row, &c);",
           "    char *p = (char *)(uintptr_t)in->base;\n    flk_for_each_row(in->ndim, in->sizes, 1, &p, strides, 0, "
           "minmax_row, &c);",
           "max- or min-", "kernels", {"max", "min"}),
    Mutant("maximum-drops-nan", "src/kernels/arithmetic.c",
           "FLK_DEF2_F(l_maximum, FLK_NOSETUP, (a != a) ? a : ((b != b) ? b : (a < b ? b : a)))",
           "FLK_DEF2_F(l_maximum, FLK_NOSETUP, (a < b ? b : a))",
           "maximum or minimum", "kernels", {"maximum"}, "nan"),
    Mutant("dropout-hangs", "src/kernels/random.c",
           "    for (int64_t off = 0; off < j->n; off += RNG_BLOCK) {",
           "    for (int64_t off = 0; off < j->n; off += 0) {",
           # A short unit timeout keeps the test quick; the hung worker is killed, the rest go on.  Not
           # shorter: the neighbour that must pass (the backward) runs under the same timeout, and
           # on a loaded 2-core CI machine it took more than 5 s.
           "native_dropout and float32", "kernels", {"native_dropout"}, "did not finish within 12 s",
           options=("--unit-timeout", "12")),
    Mutant("fast-gelu-variant-out-of-tolerance", "src/kernels/activation.c",
           "    const float t = 1.0f / (1.0f + 0.3275911f * z);",
           "    const float t = 1.0f / (1.0f + 0.3285911f * z);",   # one digit off: 6x what the fast variant may err
           "gelu- and float32", "kernels", {"gelu"}, "out of tolerance", variant="fast"),
    Mutant("dropout-zeroes-a-dropped-nan", "src/kernels/random.c",
           "            j->y[off + k] = j->x[off + k] * (keep ? j->scale : 0.0);",
           "            j->y[off + k] = keep ? j->x[off + k] * j->scale : 0.0;",
           "native_dropout and float32", "kernels", {"native_dropout"}, "expected nan"),
    Mutant("hardtanh-lets-min-win-crossed-bounds", "src/kernels/activation.c",
           "#define CLAMP_LO_HI(a, lo, hi) ((a) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : ((a) > (hi) ? (hi) : (a)))",
           "#define CLAMP_LO_HI(a, lo, hi) ((a) < (lo) ? (lo) : ((a) > (hi) ? (hi) : (a)))",
           "(hardtanh- or hardtanh_- or clamp-) and (float32 or int32)", "kernels", {"hardtanh", "hardtanh_"}),
    # Blind spots closed by deterministic probes and checks (each caught by the ci profile):
    Mutant("h2d-copies-at-call-time", "src/driver/copy.c",
           "    return st != FL_SUCCESS ? st : enqueue_copy(stream, host, src, size);",
           "    return st != FL_SUCCESS ? st : (__builtin_memcpy(host, src, size), FL_SUCCESS);",
           "every_enqueued_kind", "streams", {"test_every_enqueued_kind_waits_for_busy_work[h2d]"},
           "the h2d did not run in stream order"),
    Mutant("rerecorded-event-waits-for-first-record", "src/driver/event.c",
           "    uint64_t target = e->recorded;\n    int done = e->completed >= target;",
           "    uint64_t target = e->recorded ? 1 : 0;\n    int done = e->completed >= target;",
           "event_query_is_not_ready or rerecorded", "streams",
           {"test_rerecorded_event_moves_what_waits_wait_for"}, "waited for an earlier record"),
    Mutant("event-query-ready-behind-pending-work", "src/driver/event.c",
           "    st = e->completed >= e->recorded ? FL_SUCCESS : FL_NOT_READY;",
           "    st = FL_SUCCESS;",   # every query answers ready, pending work or not
           # Not the state machine: it learns from a ready answer rather than checking it, and then
           # fails (or not) wherever the stale knowledge happens to show.
           "event_query_is_not_ready or fifo_order", "streams",
           {"test_event_query_is_not_ready_behind_busy_work"}, "had not run"),
    # fl_abi.h ADDRESSES: an event record is work of its stream.  Marking the event complete
    # before the queue moves past the record made Stream.query() answer "busy" now and then.
    Mutant("record-completes-before-its-stream-moves-on", "src/driver/queue.c",
           "        if (t.kind == DRV_TASK_MARK) {",
           "        if (0 && t.kind == DRV_TASK_MARK) {",
           "completed_record or fifo_order", "streams",
           {"test_a_completed_record_completes_its_stream"}, "was complete, in", suite_runs=3),
    Mutant("free-returns-a-neighbours-page-to-the-host", "src/driver/memory.c",
           "    uint64_t lo = (b->start + pg - 1) & ~(pg - 1);",
           "    uint64_t lo = b->start & ~(pg - 1);",   # rounds down into the page a live neighbour shares
           "live_allocations_survive or copies_round_trip", "memory",
           {"test_live_allocations_survive_neighbours_freed_and_reused"}, "damaged data the caller still owns"),
    Mutant("uniform-float-has-16-random-bits", "src/kernels/random.c",
           "                    v[j] = lo + span * ((double)(r0[j] >> 8) * 0x1.0p-24);",
           "                    v[j] = lo + span * ((double)(r0[j] >> 16) * 0x1.0p-16);",
           "(uniform_ or neg-) and float32 and not robust", "kernels", {"uniform_"}, "random bits"),
    Mutant("philox-ignores-seed-high-word", "src/kernels/random.c",
           "    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);",
           "    uint32_t k0 = (uint32_t)seed, k1 = 0;",
           "(uniform_ or neg-) and float32 and not robust", "kernels", {"uniform_"}, "seed bit(s) 32..62"),
    Mutant("matmul-leaves-output-unwritten-for-empty-inner-dimension", "src/kernels/matmul.c",
           "        scale_zero(C, es, beta);",
           "        (void)scale_zero;",   # k = 0: the output keeps whatever the device memory held
           "(mm- or bmm-) and float32 and not robust", "kernels", {"mm", "bmm"}, "empty inner dimension"),
    Mutant("tiled-copy-drops-partial-edge-tiles", "src/kernels/copy.c",
           "            for (int64_t j0 = 0; j0 < sz[in]; j0 += TILE) {",
           "            for (int64_t j0 = 0; j0 + TILE <= sz[in]; j0 += TILE) {",
           "(copy_- or neg-) and (float32 or int64) and not robust", "kernels", {"copy_"}, "transposed source"),
    Mutant("matmul-ignores-transpose-of-aligned-column-major-b", "src/kernels/matmul.c",
           "            st = ref_gemm(a, dt, oa.trans, ob.trans, m, n, k, alpha, oa.p, oa.ld, ob.p, ob.ld, beta,\n"
           "                          C->p, ldc);",
           "            st = ref_gemm(a, dt, oa.trans, 0, m, n, k, alpha, oa.p, oa.ld, ob.p, ob.ld, beta,\n"
           "                          C->p, ldc);",
           "mm-float32 and not robust", "kernels", {"mm", "bmm", "addmm"}, "layout matrix"),
    # A Scalar[] (AdamW's per-parameter bias corrections) read as one scalar for every entry.
    Mutant("foreach-scalarlist-uses-the-first-scalar-for-every-entry", "src/kernels/foreach.c",
           "        const double s = scalars ? scalars[k] : scalar;",
           "        const double s = scalars ? scalars[0] : scalar;",
           "(ScalarList or _foreach_add_.Scalar-) and float32 and not robust", "kernels",
           {"_foreach_div_.ScalarList", "_foreach_addcdiv_.ScalarList"}, "out of tolerance"),
]


# ---- kernels that share one workspace between launches (conformance.concurrency) ----------

# The kernel (queue.c's run_kernel, for one op) computes its last tensor argument (the output)
# in one global workspace, grown as needed and never freed, then copies it out: right one
# call at a time, wrong when two launches overlap.  sched_yield stands for the rest of a real
# kernel's work between computing and copying out (a kernel of a few microseconds is rarely
# caught mid-way on a loaded 2-core host; one of real size is).
_SHARED_WORKSPACE = """\
    fl_status st;
    if (strcmp(t->u.kernel.def->op, "{op}") == 0 && t->u.kernel.nargs <= 64) {{
        static char *workspace;
        static size_t workspace_bytes;
        fl_arg args[64];
        fl_tensor inside;
        const fl_tensor *out = NULL;
        size_t bytes = 0;
        memcpy(args, t->u.kernel.args, t->u.kernel.nargs * sizeof *args);
        for (uint32_t i = t->u.kernel.nargs; i-- > 0 && !out;) {{
            if (args[i].kind != FL_ARG_TENSOR)
                continue;
            out = args[i].value.tensor;
            int64_t span = 1;
            for (int d = 0; d < out->ndim; ++d)
                span = out->sizes[d] == 0 || span == 0 ? 0 : span + (out->sizes[d] - 1) * out->strides[d];
            bytes = (size_t)span * flk_dtype_size(out->dtype);
            if (bytes > workspace_bytes) {{
                workspace = malloc(bytes);
                workspace_bytes = bytes;
            }}
            inside = *out;
            inside.base = (fl_devptr)(uintptr_t)workspace;
            inside.byte_offset = 0;
            if (bytes)
                memcpy(workspace, flk_data(out), bytes);
            args[i].value.tensor = &inside;
        }}
        st = fn(args, t->u.kernel.nargs, ctx);
        sched_yield(); /* the kernel's other work: another launch may run meanwhile */
        if (bytes)
            memcpy(flk_data(out), workspace, bytes);
    }} else
        st = fn ? fn(t->u.kernel.args, t->u.kernel.nargs, ctx)
                : flk_kernel_fail(ctx, "the kernel table has no function for it");
"""


def shared_workspace(op: str, name: str) -> Mutant:
    """`op`'s kernel computes in one workspace shared by every launch; only the
    concurrency check can see it (its numerics run one call at a time and must pass)."""
    return Mutant(name, "src/driver/queue.c",
                  "    fl_status st = fn ? fn(t->u.kernel.args, t->u.kernel.nargs, ctx)\n"
                  "                      : flk_kernel_fail(ctx, \"the kernel table has no function for it\");\n",
                  _SHARED_WORKSPACE.format(op=op), f"{op}- and (float32 or suite_concurrency)", "concurrency",
                  {op}, "differs from the same call run alone",
                  more=(("#include <errno.h>\n", "#include <errno.h>\n#include <sched.h>\n"),))


def random_table_op(seed: int = int(os.environ.get("FL_MUTANT_SEED", "41"))) -> str:
    """An op of the reference vendor's table that the test does not name: drawn (seeded)
    among the entries device 0 can run, so that the concurrency check is shown to cover
    the table, not a list."""
    import random

    from conformance.harness import kernel_entries
    from conformance.target import device_properties, load

    plugin = load(str(REFERENCE_LIBRARY))
    mask = device_properties(plugin, 0)["supported_dtypes"]
    ops = sorted({e.op for e in kernel_entries(plugin) if e.dtypes & mask and e.variant_name == "precise"})
    return random.Random(seed).choice(ops)


MUTANTS += [
    # A convolution library's im2col workspace kept in one global (as one cuDNN workspace or
    # BLAS handle shared by every stream): the concurrency check must blame convolution.
    Mutant("convolution-shares-one-im2col-workspace", "src/kernels/conv.c",
           "    char *cols = xld ? NULL : (char *)flk_alloc((size_t)(nb * cstride) * es);",
           "    static char *workspace;\n    static size_t workspace_bytes;\n"
           "    if (!xld && (size_t)(nb * cstride) * es > workspace_bytes) {\n"
           "        workspace = (char *)malloc((size_t)(nb * cstride) * es);\n"
           "        workspace_bytes = (size_t)(nb * cstride) * es;\n    }\n"
           "    char *cols = xld ? NULL : workspace;",
           "convolution- and (float32 or suite_concurrency) and not backward", "concurrency", {"convolution"},
           "differs from the same call run alone",
           more=(("    flk_free(wmat);\n    flk_free(cols);\n    flk_free(obuf);\n    flk_free(bias);\n",
                  "    flk_free(wmat);\n    flk_free(obuf);\n    flk_free(bias);\n"),
                 # the gemm's packing and set-up between im2col and its read of the columns
                 ("                B = cols;\n", "                sched_yield();\n                B = cols;\n"),
                 ("#include <stdlib.h>\n", "#include <sched.h>\n#include <stdlib.h>\n"))),
    shared_workspace("_softmax", "softmax-computes-in-one-shared-workspace"),
    # "Safe softmax": a fully masked row (all -inf) gives zeros where PyTorch CPU gives NaN.
    # Drawn cases almost never hold a whole row of -inf; conformance.special_rows always does.
    Mutant("softmax-zeroes-an-all-minus-inf-row", "src/kernels/softmax_nll.c",
           "        const float m = lanes_max(x, L);\n",
           "        const float m = lanes_max(x, L);\n"
           "        if (m == -INFINITY) {\n            for (int64_t i = 0; i < L; ++i)\n"
           "                y[i] = 0.0f;\n            return;\n        }\n",
           "(_softmax- or _softmax_backward_data-) and float32 and not suite_concurrency", "kernels",
           {"_softmax", "_log_softmax"},
           "special rows (rows along dim 1"),
]


def build_mutant(mutant: Mutant, directory: Path) -> Path:
    # Build outputs stay behind: the library, its metadata, and the hidden temporary files a
    # concurrent `fl-sdk build` of the source tree writes and renames (make test's second venv).
    shutil.copytree(SOURCE, directory, ignore=shutil.ignore_patterns("*.so", "*.meta.json", ".*", "__pycache__"))
    source = directory / mutant.file
    text = source.read_text()
    for line, replacement in ((mutant.line, mutant.replacement), *mutant.more):
        assert text.count(line) == 1, f"{mutant.file} no longer has the line {mutant.name} changes"
        text = text.replace(line, replacement)
    source.write_text(text)
    built = subprocess.run([sys.executable, "-m", "fl_sdk", "build", str(directory)], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert built.returncode == 0, built.stderr
    return next(directory.glob("*.so"))


def _selected(session: pytest.Session) -> list[Mutant]:
    return [item.callspec.params["mutant"] for item in session.items
            if getattr(item, "originalname", "") == "test_suite_fails_the_mutant_and_blames_it"]


def build_and_test(mutant: Mutant, directory: Path) -> tuple:
    """Build the mutant and run the suite on it: (completed process, run folder); the test
    reads and validates the reports."""
    library = build_mutant(mutant, directory / "plugin")
    for attempt in range(mutant.suite_runs):
        run = directory / f"run{attempt}"
        run.mkdir()
        result = run_fl_sdk_test(str(library), run, "-k", mutant.keyword, *mutant.options)
        if result.returncode != 0:
            break
    return result, run


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> dict[str, Future]:
    """The selected mutants, each built and run through the suite, two at a time in the
    background (each is a few processes of its own: this module's time halves on two
    cores; each test waits only for its own)."""
    root = tmp_path_factory.mktemp("mutants")
    pool = ThreadPoolExecutor(max_workers=2)
    request.addfinalizer(lambda: pool.shutdown(cancel_futures=True))
    return {m.name: pool.submit(build_and_test, m, root / m.name) for m in _selected(request.session)}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_suite_fails_the_mutant_and_blames_it(mutant, runs):
    result, run = runs[mutant.name].result()
    report, _ = read_reports(run)
    assert result.returncode != 0, f"the suite passed the {mutant.name} mutant:\n{result.stdout[-4000:]}"
    failed = failures(report)
    assert failed, result.stdout[-4000:]
    assert {t["category"] for t in failed} == {mutant.category}
    blamed = {t["op"] if mutant.category in ("kernels", "concurrency") else t["test"] for t in failed}
    assert blamed <= mutant.blamed, f"failures blame {blamed - mutant.blamed}, not only {mutant.blamed}"
    assert all(t["reproducer"] for t in failed)
    if mutant.variant:
        assert {t["variant"] for t in failed} == {mutant.variant}
    if mutant.says:
        assert any(mutant.says in t["message"] for t in failed), [t["message"][:300] for t in failed]
    assert any(t["status"] == "pass" for t in report["tests"]), "the neighbours that must pass did not run"


def test_suite_blames_a_shared_workspace_in_a_kernel_drawn_from_the_table(tmp_path):
    """The shared-workspace bug planted in an op drawn from the reference vendor's table
    (seeded: FL_MUTANT_SEED), not one the test names: the concurrency check covers every
    entry, so the ci profile must fail that op, and only in the concurrency category."""
    op = random_table_op()
    mutant = shared_workspace(op, f"{op}-computes-in-one-shared-workspace")
    result, run = build_and_test(mutant, tmp_path)
    report, _ = read_reports(run)
    failed = failures(report)
    assert result.returncode != 0 and failed, f"the suite passed {mutant.name}:\n{result.stdout[-4000:]}"
    assert {(t["category"], t["op"]) for t in failed} == {("concurrency", op)}, [t["message"][:300] for t in failed]
    assert all(t["reproducer"] and "differs from the same call run alone" in t["message"] for t in failed)
    assert any(t["status"] == "pass" and t["category"] == "kernels" for t in report["tests"]), \
        f"{op}'s numerics (one call at a time) did not run and pass"
