/*
 * queue.c -- the reference chip's task queues: what makes streams
 * asynchronous.  It calls no other driver file (driver.h lists the layers).
 *
 * A queue is a FIFO ring of small tasks drained by one worker thread.  A
 * task leaves the ring only after it ran, so "queue empty" means "all work
 * done".  The enqueue path takes one mutex and wakes the worker only when it
 * sleeps.  A worker that ran out of work polls the ring for a short while
 * (FL_REFERENCE_SPIN_US, default 50 us) before it sleeps: PyTorch issues
 * kernels a few microseconds apart, and waking a sleeping thread costs the
 * launching thread a futex call of ~5 us, more than the launch itself.  The
 * ring grows on demand up to QUEUE_MAX tasks; past that, enqueuers block until
 * the worker makes room (bounded memory).
 *
 * Tasks: a kernel (run through the SDK kernel interface, its arguments freed
 * afterwards), a copy, a memset, a host function (events use those for
 * their records and waits), or a host call that can fail (collectives).  A
 * small kernel launched onto an idle queue runs on the launching thread
 * instead (drv_queue_enqueue_kernel).  The first failure is kept, sticky, until
 * drv_queue_synchronize or drv_queue_query hands it out.
 */
#include "driver.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE_INITIAL 64
#define QUEUE_MAX 65536 /* power of two */

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

/* Nanoseconds FL_REFERENCE_SLOWDOWN made workers sleep after kernels (below), read
 * through fl_reference_slowdown_ns(): the tests tell a slowed device from a loaded
 * host with it.  Not part of the ABI either. */
static uint64_t slowdown_ns;

/* FL_REFERENCE_SLOWDOWN="1,4": a factor per device index (here device 1 runs 4x
 * slower; missing entries are 1).  Models chips of different speeds for
 * mixed-speed training (docs/users/distributed.md): after a kernel that took
 * t, the worker sleeps (factor - 1) * t, so a slow device costs time but no host
 * CPU.  Parsed once; an entry that is not a number >= 1 counts as 1. */
#define SLOWDOWN_MAX_DEVICES 64
static double g_slowdown[SLOWDOWN_MAX_DEVICES];
static pthread_once_t g_slowdown_once = PTHREAD_ONCE_INIT;

static void parse_slowdown(void) {
    const char *text = getenv("FL_REFERENCE_SLOWDOWN");
    for (int i = 0; i < SLOWDOWN_MAX_DEVICES; i++)
        g_slowdown[i] = 1.0;
    for (int i = 0; text && *text && i < SLOWDOWN_MAX_DEVICES; i++) {
        char *end;
        double f = strtod(text, &end);
        if (end != text && f >= 1.0 && f <= 1000.0)
            g_slowdown[i] = f;
        text = strchr(text, ',');
        if (text)
            text++;
    }
}

static void slow_down(int32_t device, uint64_t took_ns) {
    pthread_once(&g_slowdown_once, parse_slowdown);
    if (device < 0 || device >= SLOWDOWN_MAX_DEVICES || g_slowdown[device] <= 1.0)
        return;
    uint64_t extra = (uint64_t)((g_slowdown[device] - 1.0) * (double)took_ns);
    __atomic_fetch_add(&slowdown_ns, extra, __ATOMIC_RELAXED);
    struct timespec ts = {(time_t)(extra / 1000000000ull), (long)(extra % 1000000000ull)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* A slowed device's extra time is a sleep on its worker: it must cost the host no
 * thread, so its kernels never run inline on the launching thread. */
static int slowed(int32_t device) {
    pthread_once(&g_slowdown_once, parse_slowdown);
    return device >= 0 && device < SLOWDOWN_MAX_DEVICES && g_slowdown[device] > 1.0;
}

/* FL_REFERENCE_KERNEL_STATS=<path>: per kernel, its calls (how many ran inline on
 * the launching thread) and the ns spent in it, written to <path> at unload.
 * Instrumentation for the benchmarks (which kernels a training step waits on);
 * not part of the ABI, off (one cached check per kernel) unless set. */
#define STATS_SLOTS 1024 /* power of two; more kernels than this are not counted */
typedef struct kernel_stat {
    const flk_kernel *def;
    uint64_t ns, cpu_ns, calls, inline_calls; /* cpu_ns: the thread's CPU time, not preempted time */
} kernel_stat;
static kernel_stat g_stats[STATS_SLOTS];
static const char *g_stats_path;
static pthread_once_t g_stats_once = PTHREAD_ONCE_INIT;

static void read_stats_path(void) { g_stats_path = getenv("FL_REFERENCE_KERNEL_STATS"); }

static int stats_on(void) {
    pthread_once(&g_stats_once, read_stats_path);
    return g_stats_path && *g_stats_path;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void count_kernel(const flk_kernel *def, uint64_t ns, uint64_t cpu_ns, int inline_run) {
    uintptr_t h = ((uintptr_t)def >> 4) * 0x9E3779B97F4A7C15ull;
    for (unsigned probe = 0; probe < STATS_SLOTS; probe++) {
        kernel_stat *s = &g_stats[(h + probe) & (STATS_SLOTS - 1)];
        const flk_kernel *expected = NULL;
        if (__atomic_load_n(&s->def, __ATOMIC_ACQUIRE) != def &&
            !__atomic_compare_exchange_n(&s->def, &expected, def, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE) &&
            expected != def)
            continue; /* a slot of another kernel */
        __atomic_fetch_add(&s->ns, ns, __ATOMIC_RELAXED);
        __atomic_fetch_add(&s->cpu_ns, cpu_ns, __ATOMIC_RELAXED);
        __atomic_fetch_add(&s->calls, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&s->inline_calls, (uint64_t)inline_run, __ATOMIC_RELAXED);
        return;
    }
}

__attribute__((destructor)) static void write_kernel_stats(void) {
    if (!g_stats_path || !*g_stats_path)
        return;
    FILE *f = fopen(g_stats_path, "w");
    if (!f)
        return;
    fprintf(f, "op\tcalls\tinline\tns\tcpu_ns\n");
    for (unsigned i = 0; i < STATS_SLOTS; i++)
        if (g_stats[i].def)
            fprintf(f, "%s\t%llu\t%llu\t%llu\t%llu\n", g_stats[i].def->op,
                    (unsigned long long)g_stats[i].calls,
                    (unsigned long long)g_stats[i].inline_calls,
                    (unsigned long long)g_stats[i].ns, (unsigned long long)g_stats[i].cpu_ns);
    fclose(f);
}

static fl_status run_kernel(drv_queue *q, const drv_task *t, flk_ctx *ctx, int inline_run) {
    ctx->device = q->device;
    ctx->op = t->u.kernel.def->op;
    ctx->message[0] = '\0';
    flk_fn fn = t->u.kernel.def->fn;
    const int stats = stats_on();
    uint64_t cpu_start = stats ? thread_cpu_ns() : 0;
    uint64_t start = now_ns();
    fl_status st = fn ? fn(t->u.kernel.args, t->u.kernel.nargs, ctx)
                      : flk_kernel_fail(ctx, "the kernel table has no function for it");
    uint64_t took = now_ns() - start;      /* the kernel alone, before any slowdown sleep */
    __atomic_fetch_add(&kernel_time_ns, took, __ATOMIC_RELAXED);
    if (stats)
        count_kernel(t->u.kernel.def, took, thread_cpu_ns() - cpu_start, inline_run);
    slow_down(q->device, took);
    free(t->u.kernel.args);
    return st;
}

__attribute__((visibility("default"))) uint64_t fl_reference_kernel_time_ns(void);
uint64_t fl_reference_kernel_time_ns(void) { return __atomic_load_n(&kernel_time_ns, __ATOMIC_RELAXED); }

__attribute__((visibility("default"))) uint64_t fl_reference_slowdown_ns(void);
uint64_t fl_reference_slowdown_ns(void) { return __atomic_load_n(&slowdown_ns, __ATOMIC_RELAXED); }

static fl_status run_task(drv_queue *q, const drv_task *t, flk_ctx *ctx) {
    switch (t->kind) {
    case DRV_TASK_KERNEL:
        return run_kernel(q, t, ctx, 0);
    case DRV_TASK_COPY:
        /* memmove: a d2d copy may overlap within one allocation. */
        memmove(t->u.copy.dst, t->u.copy.src, t->u.copy.size);
        break;
    case DRV_TASK_MEMSET:
        memset(t->u.set.dst, t->u.set.value, t->u.set.size);
        break;
    case DRV_TASK_HOST:
    case DRV_TASK_MARK:
        t->u.host.fn(t->u.host.obj, t->u.host.value);
        break;
    case DRV_TASK_CALL:
        ctx->message[0] = '\0';
        return t->u.call.fn(t->u.call.obj, ctx->message, sizeof ctx->message);
    }
    return FL_SUCCESS;
}

/* Keep the first failure until someone reads it; later work still runs so
 * that events recorded after a failure complete and nobody waits forever. */
static void note_failure_locked(drv_queue *q, const drv_task *t, fl_status st,
                                const flk_ctx *ctx) {
    if (q->error != FL_SUCCESS)
        return;
    q->error = st;
    if (t->kind == DRV_TASK_KERNEL)
        snprintf(q->error_message, sizeof q->error_message, "kernel %s failed on stream: %s",
                 t->u.kernel.def->op, ctx->message);
    else
        snprintf(q->error_message, sizeof q->error_message, "%s", ctx->message);
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
static void spin_for_work(drv_queue *q) {
    uint64_t seen = q->tail, budget = spin_ns();
    if (budget == 0)
        return;
    pthread_mutex_unlock(&q->lock);
    uint64_t deadline = now_ns() + budget;
    while (__atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) == seen &&
           !__atomic_load_n(&q->shutdown, __ATOMIC_ACQUIRE) && now_ns() < deadline)
        __builtin_ia32_pause();
    pthread_mutex_lock(&q->lock);
}

static void *worker_main(void *arg) {
    drv_queue *q = arg;
    flk_ctx ctx;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        if (q->head == q->tail && !q->shutdown)
            spin_for_work(q);
        while (q->head == q->tail && !q->shutdown) {
            q->worker_sleeping = 1;
            pthread_cond_wait(&q->work_cv, &q->lock);
        }
        q->worker_sleeping = 0;
        if (q->head == q->tail)
            break; /* shut down and drained */
        drv_task t = q->ring[q->head & (q->cap - 1)];
        if (t.kind == DRV_TASK_MARK) {
            /* fl_abi.h: stream_query is done exactly when every record on the
             * stream is complete; one critical section makes both visible. */
            run_task(q, &t, &ctx);
            q->head++;
            if (q->done_waiters)
                pthread_cond_broadcast(&q->done_cv);
            continue;
        }
        pthread_mutex_unlock(&q->lock);
        fl_status st = run_task(q, &t, &ctx);
        pthread_mutex_lock(&q->lock);
        if (st != FL_SUCCESS)
            note_failure_locked(q, &t, st, &ctx);
        q->head++;
        if (q->done_waiters)
            pthread_cond_broadcast(&q->done_cv);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* ---- enqueue ---------------------------------------------------------------- */

static int grow_ring_locked(drv_queue *q) {
    uint64_t cap = q->cap * 2;
    drv_task *ring = malloc(cap * sizeof *ring);
    if (!ring)
        return 0;
    /* Keep each task at the same logical index; only the mask changes. */
    for (uint64_t i = q->head; i < q->tail; i++)
        ring[i & (cap - 1)] = q->ring[i & (q->cap - 1)];
    free(q->ring);
    q->ring = ring;
    q->cap = cap;
    return 1;
}

/* Wait for and reserve one free slot; returns it, or NULL (host OOM). */
static drv_task *reserve_slot_locked(drv_queue *q) {
    while (q->tail - q->head >= QUEUE_MAX) {
        q->done_waiters++;
        pthread_cond_wait(&q->done_cv, &q->lock);
        q->done_waiters--;
    }
    if (q->tail - q->head == q->cap && !grow_ring_locked(q))
        return NULL;
    return &q->ring[q->tail & (q->cap - 1)];
}

/* Publish the reserved slot; the wake happens after unlocking so the worker
 * does not wake into a held mutex. */
static fl_status publish_and_unlock(drv_queue *q) {
    __atomic_store_n(&q->tail, q->tail + 1, __ATOMIC_RELEASE); /* the spinning worker polls it */
    int wake = q->worker_sleeping;
    q->worker_sleeping = 0;
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_signal(&q->work_cv);
    return FL_SUCCESS;
}

static fl_status queue_full_error(drv_queue *q) {
    pthread_mutex_unlock(&q->lock);
    return fld_fail(FL_ERROR_INTERNAL, "stream %p: out of host memory growing the task queue",
                    (void *)q);
}

fl_status drv_queue_enqueue_with(drv_queue *q, void (*fill)(drv_task *slot, void *ctx),
                                 void *ctx) {
    pthread_mutex_lock(&q->lock);
    drv_task *slot = reserve_slot_locked(q);
    if (!slot)
        return queue_full_error(q);
    fill(slot, ctx);
    return publish_and_unlock(q);
}

/* Kernels touching at most this many bytes of tensor data may run inline
 * (FL_REFERENCE_INLINE_BYTES; 0 turns it off).  Handing a kernel of a few
 * microseconds to the worker costs more than the kernel on a busy host: the
 * worker must be scheduled, and on a machine with fewer free cores than
 * threads it waits for the launching thread's time slice to end. */
static uint64_t inline_bytes(void) {
    static uint64_t cached = UINT64_MAX;
    if (cached == UINT64_MAX) {
        const char *text = getenv("FL_REFERENCE_INLINE_BYTES");
        long long n = text ? strtoll(text, NULL, 10) : 65536;
        cached = (uint64_t)(n < 0 ? 0 : n);
    }
    return cached;
}

fl_status drv_queue_enqueue_kernel(drv_queue *q, const drv_task *task, uint64_t bytes) {
    pthread_mutex_lock(&q->lock);
    if (q->head == q->tail && bytes <= inline_bytes() && inline_bytes() > 0 && !slowed(q->device)) {
        /* The queue is idle: every task enqueued before has run, so running this
         * one here and now keeps the stream's FIFO order.  The lock is held while
         * it runs, so a later enqueue (any thread), synchronize or query waits for
         * it; a failure becomes the queue's sticky error, as on the worker. */
        flk_ctx ctx;
        fl_status st = run_kernel(q, task, &ctx, 1);
        if (st != FL_SUCCESS)
            note_failure_locked(q, task, st, &ctx);
        pthread_mutex_unlock(&q->lock);
        return FL_SUCCESS;
    }
    drv_task *slot = reserve_slot_locked(q);
    if (!slot)
        return queue_full_error(q);
    *slot = *task;
    return publish_and_unlock(q);
}

fl_status drv_queue_enqueue(drv_queue *q, const drv_task *task) {
    pthread_mutex_lock(&q->lock);
    drv_task *slot = reserve_slot_locked(q);
    if (!slot)
        return queue_full_error(q);
    *slot = *task;
    return publish_and_unlock(q);
}

/* ---- start / stop / synchronize / query ----------------------------------- */

/* Workers block asynchronous signals (they inherit the mask), so Ctrl-C and
 * friends go to the application's threads, not into a running kernel. */
static int start_worker(drv_queue *q) {
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&q->thread, NULL, worker_main, q);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

fl_status drv_queue_start(drv_queue *q, int32_t device, const char *call) {
    memset(q, 0, sizeof *q);
    q->ring = malloc(QUEUE_INITIAL * sizeof *q->ring);
    if (!q->ring)
        return fld_fail(FL_ERROR_INTERNAL, "%s(device=%d): out of host memory", call, device);
    q->device = device;
    q->cap = QUEUE_INITIAL;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->work_cv, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    int rc = start_worker(q);
    if (rc != 0) {
        pthread_cond_destroy(&q->work_cv);
        pthread_cond_destroy(&q->done_cv);
        pthread_mutex_destroy(&q->lock);
        free(q->ring);
        return fld_fail(FL_ERROR_DRIVER, "%s(device=%d): cannot start worker: %s", call, device,
                        strerror(rc));
    }
    return FL_SUCCESS;
}

/* Block until every task enqueued before this call has run. */
static void drain_locked(drv_queue *q) {
    uint64_t target = q->tail;
    q->done_waiters++;
    while (q->head < target)
        pthread_cond_wait(&q->done_cv, &q->lock);
    q->done_waiters--;
}

/* Hand out the sticky error once, copying its message ("kernel <op> failed
 * on stream: ...") into the caller's thread-local error; the caller holds
 * q->lock. */
static fl_status take_error_locked(drv_queue *q) {
    fl_status st = q->error;
    if (st == FL_SUCCESS)
        return st;
    q->error = FL_SUCCESS;
    return fld_fail(st, "%s", q->error_message);
}

void drv_queue_stop(drv_queue *q) {
    pthread_mutex_lock(&q->lock);
    drain_locked(q);
    __atomic_store_n(&q->shutdown, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&q->lock);
    pthread_cond_signal(&q->work_cv);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->work_cv);
    pthread_cond_destroy(&q->done_cv);
    pthread_mutex_destroy(&q->lock);
    free(q->ring);
}

fl_status drv_queue_synchronize(drv_queue *q) {
    pthread_mutex_lock(&q->lock);
    drain_locked(q);
    fl_status st = take_error_locked(q);
    pthread_mutex_unlock(&q->lock);
    return st;
}

/* A recorded failure is reported as soon as it is known, pending or not. */
fl_status drv_queue_query(drv_queue *q) {
    pthread_mutex_lock(&q->lock);
    fl_status st = take_error_locked(q);
    if (st == FL_SUCCESS && q->head != q->tail)
        st = FL_NOT_READY;
    pthread_mutex_unlock(&q->lock);
    return st;
}
