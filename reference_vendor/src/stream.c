/*
 * stream.c -- streams of the reference chip and launch_kernel.
 *
 * A stream is a FIFO ring of small tasks drained by one worker thread.  A
 * task leaves the ring only after it ran, so "queue empty" means "all work
 * done".  The enqueue path takes one mutex and wakes the worker only when it
 * sleeps.  A worker that ran out of work polls the ring for a short while
 * (FL_REFERENCE_SPIN_US, default 50 us) before it sleeps: PyTorch issues
 * kernels a few microseconds apart, and waking a sleeping thread costs the
 * launching thread a futex call of ~5 us, more than the launch itself.  The
 * ring grows on demand up to QUEUE_MAX tasks; past that, enqueuers block until
 * the worker makes room (bounded memory).
 *
 * launch_kernel validates its arguments against the device's live
 * allocations, deep-copies them into one heap block (tensor bases rewritten
 * to the device's private host view) and queues the kernel.
 */
#include "internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STREAM_MAGIC 0x53545245414d2121ull /* "STREAM!!" */
#define QUEUE_INITIAL 64
#define QUEUE_MAX 65536 /* power of two */

struct fl_stream_impl {
    uint64_t magic;
    int32_t device;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work_cv;          /* worker waits here for tasks */
    pthread_cond_t done_cv;          /* synchronize / full-queue waiters */
    drv_task *ring;
    uint64_t cap;                    /* power of two */
    uint64_t head, tail;             /* tasks [head, tail) are pending */
    int worker_sleeping;
    int done_waiters;
    int shutdown;
    fl_status error;                 /* sticky error, reported once */
    char error_message[DRV_MESSAGE_MAX];
};

fl_status drv_stream_check(fl_stream stream, const char *call) {
    if (!stream)
        return drv_fail(FL_ERROR_INVALID_HANDLE, "%s: stream is NULL", call);
    if (stream->magic != STREAM_MAGIC)
        return drv_fail(FL_ERROR_INVALID_HANDLE, "%s: %p is not a live stream", call,
                        (void *)stream);
    return FL_SUCCESS;
}

int32_t drv_stream_device(fl_stream stream) { return stream->device; }

/* ---- the worker ------------------------------------------------------------- */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Nanoseconds spent inside kernels, all streams together: instrumentation for
 * the benchmarks (what share of a training step is runtime overhead), read
 * through fl_reference_kernel_time_ns(); not part of the ABI. */
static uint64_t kernel_time_ns;

static fl_status run_kernel(fl_stream s, const drv_task *t, ref_kernel_ctx *ctx) {
    ctx->device = s->device;
    ctx->message[0] = '\0';
    ref_kernel_fn fn = t->u.kernel.def->fn;
    uint64_t start = now_ns();
    fl_status st = fn ? fn(t->u.kernel.args, t->u.kernel.nargs, ctx)
                      : ref_kernel_fail(ctx, "the kernel table has no function for it");
    __atomic_fetch_add(&kernel_time_ns, now_ns() - start, __ATOMIC_RELAXED);
    free(t->u.kernel.args);
    return st;
}

__attribute__((visibility("default"))) uint64_t fl_reference_kernel_time_ns(void);
uint64_t fl_reference_kernel_time_ns(void) { return __atomic_load_n(&kernel_time_ns, __ATOMIC_RELAXED); }

static fl_status run_task(fl_stream s, const drv_task *t, ref_kernel_ctx *ctx) {
    switch (t->kind) {
    case DRV_TASK_KERNEL:
        return run_kernel(s, t, ctx);
    case DRV_TASK_COPY:
        /* memmove: a d2d copy may overlap within one allocation. */
        memmove(t->u.copy.dst, t->u.copy.src, t->u.copy.size);
        break;
    case DRV_TASK_MEMSET:
        memset(t->u.set.dst, t->u.set.value, t->u.set.size);
        break;
    case DRV_TASK_RECORD:
        drv_event_complete(t->u.event.event, t->u.event.generation);
        drv_event_release(t->u.event.event);
        break;
    case DRV_TASK_WAIT:
        drv_event_block_until(t->u.event.event, t->u.event.generation);
        drv_event_release(t->u.event.event);
        break;
    }
    return FL_SUCCESS;
}

/* Keep the first failure until someone reads it; later work still runs so
 * that events recorded after a failure complete and nobody waits forever. */
static void note_failure_locked(fl_stream s, const drv_task *t, fl_status st,
                                const ref_kernel_ctx *ctx) {
    if (s->error != FL_SUCCESS)
        return;
    s->error = st;
    snprintf(s->error_message, sizeof s->error_message, "kernel %s failed on stream: %s",
             t->u.kernel.def->op, ctx->message);
}

static uint64_t spin_ns(void) {
    static uint64_t cached = UINT64_MAX;
    if (cached == UINT64_MAX) {
        const char *text = getenv("FL_REFERENCE_SPIN_US");
        long us = text ? strtol(text, NULL, 10) : 50;
        cached = (uint64_t)(us < 0 ? 0 : us) * 1000ull;
    }
    return cached;
}

/* Called with the lock held and the ring empty: release the lock and poll the
 * ring's tail for up to spin_ns(); returns with the lock held again. */
static void spin_for_work(fl_stream s) {
    uint64_t seen = s->tail, budget = spin_ns();
    if (budget == 0)
        return;
    pthread_mutex_unlock(&s->lock);
    uint64_t deadline = now_ns() + budget;
    while (__atomic_load_n(&s->tail, __ATOMIC_ACQUIRE) == seen &&
           !__atomic_load_n(&s->shutdown, __ATOMIC_ACQUIRE) && now_ns() < deadline)
        __builtin_ia32_pause();
    pthread_mutex_lock(&s->lock);
}

static void *worker_main(void *arg) {
    fl_stream s = arg;
    ref_kernel_ctx ctx;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (s->head == s->tail && !s->shutdown)
            spin_for_work(s);
        while (s->head == s->tail && !s->shutdown) {
            s->worker_sleeping = 1;
            pthread_cond_wait(&s->work_cv, &s->lock);
        }
        s->worker_sleeping = 0;
        if (s->head == s->tail)
            break; /* shut down and drained */
        drv_task t = s->ring[s->head & (s->cap - 1)];
        pthread_mutex_unlock(&s->lock);
        fl_status st = run_task(s, &t, &ctx);
        pthread_mutex_lock(&s->lock);
        if (st != FL_SUCCESS)
            note_failure_locked(s, &t, st, &ctx);
        s->head++;
        if (s->done_waiters)
            pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- enqueue ---------------------------------------------------------------- */

static int grow_ring_locked(fl_stream s) {
    uint64_t cap = s->cap * 2;
    drv_task *ring = malloc(cap * sizeof *ring);
    if (!ring)
        return 0;
    /* Keep each task at the same logical index; only the mask changes. */
    for (uint64_t i = s->head; i < s->tail; i++)
        ring[i & (cap - 1)] = s->ring[i & (s->cap - 1)];
    free(s->ring);
    s->ring = ring;
    s->cap = cap;
    return 1;
}

/* Wait for and reserve one free slot; returns it, or NULL (host OOM). */
static drv_task *reserve_slot_locked(fl_stream s) {
    while (s->tail - s->head >= QUEUE_MAX) {
        s->done_waiters++;
        pthread_cond_wait(&s->done_cv, &s->lock);
        s->done_waiters--;
    }
    if (s->tail - s->head == s->cap && !grow_ring_locked(s))
        return NULL;
    return &s->ring[s->tail & (s->cap - 1)];
}

/* Publish the reserved slot; the wake happens after unlocking so the worker
 * does not wake into a held mutex. */
static fl_status publish_and_unlock(fl_stream s) {
    __atomic_store_n(&s->tail, s->tail + 1, __ATOMIC_RELEASE); /* the spinning worker polls it */
    int wake = s->worker_sleeping;
    s->worker_sleeping = 0;
    pthread_mutex_unlock(&s->lock);
    if (wake)
        pthread_cond_signal(&s->work_cv);
    return FL_SUCCESS;
}

static fl_status queue_full_error(fl_stream s) {
    pthread_mutex_unlock(&s->lock);
    return drv_fail(FL_ERROR_INTERNAL, "stream %p: out of host memory growing the task queue",
                    (void *)s);
}

fl_status drv_stream_enqueue_with(fl_stream s, void (*fill)(drv_task *slot, void *ctx),
                                  void *ctx) {
    pthread_mutex_lock(&s->lock);
    drv_task *slot = reserve_slot_locked(s);
    if (!slot)
        return queue_full_error(s);
    fill(slot, ctx);
    return publish_and_unlock(s);
}

fl_status drv_stream_enqueue(fl_stream s, const drv_task *task) {
    pthread_mutex_lock(&s->lock);
    drv_task *slot = reserve_slot_locked(s);
    if (!slot)
        return queue_full_error(s);
    *slot = *task;
    return publish_and_unlock(s);
}

/* ---- create / destroy / synchronize / query ------------------------------ */

/* Workers block asynchronous signals (they inherit the mask), so Ctrl-C and
 * friends go to the application's threads, not into a running kernel. */
static int start_worker(fl_stream s) {
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, worker_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

fl_status drv_stream_create(int32_t device, fl_stream *out) {
    if (!out)
        return drv_fail(FL_ERROR_INVALID_POINTER,
                        "stream_create(device=%d, out=NULL): NULL output pointer", device);
    *out = NULL;
    if (!drv_device_get(device))
        return drv_bad_device(device, "stream_create");
    fl_stream s = calloc(1, sizeof *s);
    drv_task *ring = malloc(QUEUE_INITIAL * sizeof *ring);
    if (!s || !ring) {
        free(s);
        free(ring);
        return drv_fail(FL_ERROR_INTERNAL, "stream_create(device=%d): out of host memory", device);
    }
    s->device = device;
    s->ring = ring;
    s->cap = QUEUE_INITIAL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    s->magic = STREAM_MAGIC;
    int rc = start_worker(s);
    if (rc != 0) {
        s->magic = 0;
        free(ring);
        free(s);
        return drv_fail(FL_ERROR_DRIVER, "stream_create(device=%d): cannot start worker: %s",
                        device, strerror(rc));
    }
    *out = s;
    return FL_SUCCESS;
}

/* Block until every task enqueued before this call has run. */
static void drain_locked(fl_stream s) {
    uint64_t target = s->tail;
    s->done_waiters++;
    while (s->head < target)
        pthread_cond_wait(&s->done_cv, &s->lock);
    s->done_waiters--;
}

/* Hand out the sticky error once, copying its message ("kernel <op> failed
 * on stream: ...") into the caller's thread-local error; the caller holds
 * s->lock. */
static fl_status take_error_locked(fl_stream s) {
    fl_status st = s->error;
    if (st == FL_SUCCESS)
        return st;
    s->error = FL_SUCCESS;
    return drv_fail(st, "%s", s->error_message);
}

fl_status drv_stream_destroy(fl_stream s) {
    fl_status st = drv_stream_check(s, "stream_destroy");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&s->lock);
    drain_locked(s);
    __atomic_store_n(&s->shutdown, 1, __ATOMIC_RELEASE);
    s->magic = 0;
    pthread_mutex_unlock(&s->lock);
    pthread_cond_signal(&s->work_cv);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    pthread_mutex_destroy(&s->lock);
    free(s->ring);
    free(s);
    return FL_SUCCESS;
}

fl_status drv_stream_synchronize(fl_stream s) {
    fl_status st = drv_stream_check(s, "stream_synchronize");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&s->lock);
    drain_locked(s);
    st = take_error_locked(s);
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* A recorded failure is reported as soon as it is known, pending or not. */
fl_status drv_stream_query(fl_stream s) {
    fl_status st = drv_stream_check(s, "stream_query");
    if (st != FL_SUCCESS)
        return st;
    pthread_mutex_lock(&s->lock);
    st = take_error_locked(s);
    if (st == FL_SUCCESS && s->head != s->tail)
        st = FL_NOT_READY;
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* ---- launch_kernel: validation ------------------------------------------- */

/* How much the deep copy needs; counted while validating. */
typedef struct launch_plan {
    const char *op;
    drv_device *dev;
    size_t tensors;      /* fl_tensor structs */
    size_t ptrs;         /* entries of tensor-list pointer arrays */
    size_t words;        /* 8-byte values: sizes, strides, int and float lists */
    size_t chars;        /* string bytes, NULs included */
} launch_plan;

static const uint8_t g_itemsize[FL_DTYPE_COUNT] = {
    [FL_FLOAT32] = 4, [FL_FLOAT64] = 8, [FL_FLOAT16] = 2, [FL_BFLOAT16] = 2,
    [FL_INT8] = 1,    [FL_UINT8] = 1,   [FL_INT16] = 2,   [FL_INT32] = 4,
    [FL_INT64] = 8,   [FL_BOOL] = 1,    [FL_COMPLEX64] = 8,
};

/* Failure message prefix "launch_kernel(op): argument i[ entry j]". */
static fl_status arg_fail(const launch_plan *p, uint32_t argi, int64_t entry, const char *what) {
    char where[48] = "";
    if (entry >= 0)
        snprintf(where, sizeof where, " entry %lld", (long long)entry);
    return drv_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): argument %u%s: %s", p->op, argi,
                    where, what);
}

/* Bytes spanned by the tensor's elements: ((sum (size-1)*stride) + 1) * item,
 * or 0 when it has no elements.  Returns 0 on overflow via *ok. */
static uint64_t tensor_extent(const fl_tensor *t, int *ok) {
    uint64_t last = 0, span;
    *ok = 1;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0)
            return 0;
        uint64_t step;
        if (__builtin_mul_overflow((uint64_t)(t->sizes[d] - 1), (uint64_t)t->strides[d], &step) ||
            __builtin_add_overflow(last, step, &last))
            return *ok = 0, 0;
    }
    if (__builtin_add_overflow(last, 1, &span) ||
        __builtin_mul_overflow(span, g_itemsize[t->dtype], &span))
        return *ok = 0, 0;
    return span;
}

static const char *tensor_shape_problem(const fl_tensor *t) {
    if (t->struct_size < FL_STRUCT_SIZE(fl_tensor, strides))
        return "fl_tensor.struct_size is too small";
    if (t->dtype < 0 || t->dtype >= FL_DTYPE_COUNT)
        return "unknown dtype";
    if (t->ndim < 0)
        return "negative ndim";
    if (t->ndim > 0 && (!t->sizes || !t->strides))
        return "NULL sizes or strides";
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] < 0 || t->strides[d] < 0)
            return "negative size or stride";
    return NULL;
}

/* Validate one tensor (caller holds the device lock) and count its copy. */
static fl_status plan_tensor(launch_plan *p, const fl_tensor *t, uint32_t argi, int64_t entry) {
    char msg[256];
    const char *problem = tensor_shape_problem(t);
    if (problem)
        return arg_fail(p, argi, entry, problem);
    int ok;
    uint64_t extent = tensor_extent(t, &ok), alloc_size = 0;
    if (!ok)
        return arg_fail(p, argi, entry, "tensor extent overflows");
    /* An empty tensor touches no memory; PyTorch gives those a null base. */
    drv_range_check rc = extent ? drv_mem_check_locked(p->dev, t->base, t->byte_offset, extent,
                                                       &alloc_size)
                                : DRV_RANGE_OK;
    if (rc == DRV_RANGE_NO_ALLOCATION) {
        snprintf(msg, sizeof msg,
                 "tensor base 0x%llx (byte_offset %llu, extent %llu) is not inside a live "
                 "allocation on device %d",
                 (unsigned long long)t->base, (unsigned long long)t->byte_offset,
                 (unsigned long long)extent, p->dev->index);
        return arg_fail(p, argi, entry, msg);
    }
    if (rc == DRV_RANGE_OUT_OF_BOUNDS) {
        snprintf(msg, sizeof msg,
                 "tensor base 0x%llx + byte_offset %llu + extent %llu overruns its allocation "
                 "of %llu bytes on device %d",
                 (unsigned long long)t->base, (unsigned long long)t->byte_offset,
                 (unsigned long long)extent, (unsigned long long)alloc_size, p->dev->index);
        return arg_fail(p, argi, entry, msg);
    }
    p->tensors++;
    p->words += 2 * (size_t)t->ndim;
    return FL_SUCCESS;
}

static fl_status plan_list(launch_plan *p, const fl_arg *a, uint32_t argi) {
    if (a->count && !a->value.ints)
        return arg_fail(p, argi, -1, "list with count > 0 has a NULL pointer");
    if (a->kind != FL_ARG_TENSOR_LIST) {
        p->words += a->count;
        return FL_SUCCESS;
    }
    p->ptrs += a->count;
    for (uint32_t j = 0; j < a->count; j++) {
        const fl_tensor *t = a->value.tensors[j];
        fl_status st = t ? plan_tensor(p, t, argi, j) : FL_SUCCESS;
        if (st != FL_SUCCESS)
            return st;
    }
    return FL_SUCCESS;
}

static fl_status plan_arg(launch_plan *p, const fl_arg *a, uint32_t argi) {
    switch (a->kind) {
    case FL_ARG_NONE:
    case FL_ARG_INT:
    case FL_ARG_FLOAT:
    case FL_ARG_BOOL:
        return FL_SUCCESS;
    case FL_ARG_TENSOR:
        if (!a->value.tensor)
            return arg_fail(p, argi, -1, "tensor argument is NULL (use FL_ARG_NONE)");
        return plan_tensor(p, a->value.tensor, argi, -1);
    case FL_ARG_INT_LIST:
    case FL_ARG_FLOAT_LIST:
    case FL_ARG_BOOL_LIST:
    case FL_ARG_TENSOR_LIST:
        return plan_list(p, a, argi);
    case FL_ARG_STRING:
        if (!a->value.str)
            return arg_fail(p, argi, -1, "string argument is NULL");
        p->chars += strlen(a->value.str) + 1;
        return FL_SUCCESS;
    default:
        return arg_fail(p, argi, -1, "unknown fl_arg kind");
    }
}

static fl_status plan_args(launch_plan *p, const fl_arg *args, uint32_t nargs) {
    fl_status st = FL_SUCCESS;
    pthread_mutex_lock(&p->dev->lock);
    for (uint32_t i = 0; i < nargs && st == FL_SUCCESS; i++)
        st = plan_arg(p, &args[i], i);
    pthread_mutex_unlock(&p->dev->lock);
    return st;
}

/* ---- launch_kernel: deep copy ---------------------------------------------- */

/* Cursors into the single block: all 8-byte-aligned parts first, strings last. */
typedef struct copy_cursor {
    const drv_device *dev;
    fl_tensor *tensor;
    const fl_tensor **ptr;
    int64_t *word;
    char *chars;
} copy_cursor;

static void *take_words(copy_cursor *c, const void *src, size_t n) {
    int64_t *dst = c->word;
    memcpy(dst, src, n * sizeof *dst);
    c->word += n;
    return dst;
}

/* Copy a tensor, pointing its base at the private view (or at nothing when
 * an empty tensor's base is not device memory). */
static const fl_tensor *copy_tensor(copy_cursor *c, const fl_tensor *src) {
    fl_tensor *t = c->tensor++;
    t->struct_size = sizeof *t;
    t->base = drv_mem_in_region(c->dev, src->base)
                  ? (fl_devptr)(uintptr_t)drv_mem_host(c->dev, src->base) : 0;
    t->byte_offset = src->byte_offset;
    t->dtype = src->dtype;
    t->ndim = src->ndim;
    t->sizes = take_words(c, src->sizes, (size_t)src->ndim);
    t->strides = take_words(c, src->strides, (size_t)src->ndim);
    return t;
}

static void copy_arg(copy_cursor *c, fl_arg *dst, const fl_arg *src) {
    *dst = *src;
    switch (src->kind) {
    case FL_ARG_TENSOR:
        dst->value.tensor = copy_tensor(c, src->value.tensor);
        break;
    case FL_ARG_INT_LIST:
    case FL_ARG_BOOL_LIST:
    case FL_ARG_FLOAT_LIST: /* int64 and double are both 8 bytes */
        dst->value.ints = take_words(c, src->value.ints, src->count);
        break;
    case FL_ARG_TENSOR_LIST: {
        const fl_tensor **list = c->ptr;
        c->ptr += src->count;
        for (uint32_t j = 0; j < src->count; j++)
            list[j] = src->value.tensors[j] ? copy_tensor(c, src->value.tensors[j]) : NULL;
        dst->value.tensors = list;
        break;
    }
    case FL_ARG_STRING: {
        size_t n = strlen(src->value.str) + 1;
        memcpy(c->chars, src->value.str, n);
        dst->value.str = c->chars;
        c->chars += n;
        break;
    }
    default:
        break;
    }
}

static fl_arg *copy_args(const launch_plan *p, const fl_arg *args, uint32_t nargs) {
    size_t head = nargs * sizeof(fl_arg), tens = p->tensors * sizeof(fl_tensor);
    size_t ptrs = p->ptrs * sizeof(fl_tensor *), words = p->words * sizeof(int64_t);
    char *block = malloc(head + tens + ptrs + words + p->chars + 1);
    if (!block)
        return NULL;
    copy_cursor c = {
        .dev = p->dev,
        .tensor = (fl_tensor *)(block + head),
        .ptr = (const fl_tensor **)(block + head + tens),
        .word = (int64_t *)(block + head + tens + ptrs),
        .chars = block + head + tens + ptrs + words,
    };
    fl_arg *out = (fl_arg *)block;
    for (uint32_t i = 0; i < nargs; i++)
        copy_arg(&c, &out[i], &args[i]);
    return out;
}

/* Every tensor the chip stores is real: no kernel takes complex64, so a call
 * with one is declined before the kernel's own check fails on the stream. */
static const char *complex_argument(const fl_arg *args, uint32_t nargs) {
    for (uint32_t i = 0; i < nargs; i++) {
        const fl_arg *a = &args[i];
        if (a->kind == FL_ARG_TENSOR && a->value.tensor->dtype == FL_COMPLEX64)
            return "complex64 tensors are not supported by the reference chip";
        for (uint32_t j = 0; a->kind == FL_ARG_TENSOR_LIST && j < a->count; j++)
            if (a->value.tensors[j] && a->value.tensors[j]->dtype == FL_COMPLEX64)
                return "complex64 tensors are not supported by the reference chip";
    }
    return NULL;
}

/* FL_ERROR_NOT_SUPPORTED (nothing enqueued) for a call the kernel cannot
 * compute: see ref_kernel_def.accepts. */
static fl_status decline_unsupported(const ref_kernel_def *def, int32_t device,
                                     const fl_arg *args, uint32_t nargs) {
    const char *complex = complex_argument(args, nargs);
    if (complex)
        return drv_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: %s", def->op, complex);
    if (!def->accepts)
        return FL_SUCCESS;
    ref_kernel_ctx ctx = {.device = device, .message = ""};
    if (def->accepts(args, nargs, &ctx) != FL_ERROR_NOT_SUPPORTED)
        return FL_SUCCESS;   /* malformed arguments fail in the kernel, on the stream */
    return drv_fail(FL_ERROR_NOT_SUPPORTED, "launch_kernel(%s) declines: %s", def->op,
                    ctx.message[0] ? ctx.message : "arguments not supported");
}

fl_status drv_launch_kernel(fl_stream stream, const fl_kernel_entry *kernel, const fl_arg *args,
                            uint32_t nargs) {
    fl_status st = drv_stream_check(stream, "launch_kernel");
    if (st != FL_SUCCESS)
        return st;
    const ref_kernel_def *def = drv_kernel_resolve(kernel);
    if (!def)
        return drv_fail(FL_ERROR_INVALID_HANDLE,
                        "launch_kernel: kernel entry %p is not from this plugin's kernel table",
                        (const void *)kernel);
    launch_plan plan = {.op = def->op, .dev = drv_device_get(stream->device)};
    if (nargs && !args)
        return drv_fail(FL_ERROR_INVALID_VALUE, "launch_kernel(%s): args is NULL with nargs=%u",
                        def->op, nargs);
    if ((st = plan_args(&plan, args, nargs)) != FL_SUCCESS)
        return st;
    if ((st = decline_unsupported(def, plan.dev->index, args, nargs)) != FL_SUCCESS)
        return st;
    fl_arg *copy = copy_args(&plan, args, nargs);
    if (!copy)
        return drv_fail(FL_ERROR_INTERNAL, "launch_kernel(%s): out of host memory", def->op);
    drv_task t = {.kind = DRV_TASK_KERNEL, .u.kernel = {.def = def, .args = copy, .nargs = nargs}};
    st = drv_stream_enqueue(stream, &t);
    if (st != FL_SUCCESS)
        free(copy);
    return st;
}
