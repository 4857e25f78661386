/*
 * collective.c -- the reference chip's collectives (fl_abi.h, "collectives",
 * ABI 1.1): communicators between processes of one host over POSIX shared
 * memory, each collective a task on the caller's stream.  Calls stream.c,
 * memory.c, device.c and queue.c (driver.h lists the layers).
 *
 * RENDEZVOUS.  The unique id names a shared-memory segment ("/flref-<pid>-
 * <random>"); every rank opens (creating if first) and sizes it identically,
 * counts itself in, and waits until all `size` ranks have: then rank 0
 * unlinks the name (the mappings stay), so nothing is left behind in
 * /dev/shm even when a job dies later.
 *
 * DATA PATH.  The segment holds one slot of SLOT_BYTES per rank and one
 * mailbox per (sender, receiver) pair.  A collective runs in chunks; per
 * chunk ("step", numbered alike on every rank because ranks run the same
 * collectives in the same order) each rank copies its contribution into its
 * slot, publishes its call signature and the step number, and waits for every
 * rank's; each then computes its own output from all slots, reducing in rank
 * order so that every rank gets the same bits, and publishes "finished"; the
 * slot is reused only after every rank finished the step.  A rank that sees a
 * different signature (another collective, count, dtype, op or root) fails
 * with FL_ERROR_COLLECTIVE_MISMATCH, and so does every other rank, which sees
 * the same signatures.  A peer that does not arrive within the timeout makes
 * the step fail with FL_ERROR_TIMEOUT and breaks the communicator (its steps
 * are out of step for good).
 *
 * DEAD PEERS.  Every rank records its pid, its pid namespace and its start
 * time in the segment when it joins.  While waiting for a peer, a rank checks
 * at most every PEER_CHECK_NS whether that peer's process still runs (gone,
 * a zombie, or its pid reused by another process: dead); a dead peer will never
 * arrive, so the wait fails at once with FL_ERROR_TIMEOUT naming the rank and
 * its pid, instead of at the deadline (minutes).  Peers in another pid
 * namespace are not checked (their pids mean nothing here): for them only the
 * deadline holds.
 *
 * Work on one communicator is serialised by its lock (a collective blocks its
 * stream's worker until the peers arrive, which is the stream order the ABI
 * asks for); send/recv use the mailbox of their pair, with one lock per peer
 * and direction.
 */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COMM_MAGIC 0x434f4d4d554e2121ull /* "COMMUN!!" */
#define ID_MAGIC "flref-coll-1"
#define MAX_RANKS 8
#define SLOT_BYTES (4u << 20)
#define MAILBOX_BYTES (256u << 10)
#define DEFAULT_TIMEOUT_MS 300000u
#define LINE 64
#define PEER_CHECK_NS 200000000ull /* how often a waiting rank checks that its peer still runs */

typedef enum coll_kind { K_ALL_REDUCE = 1, K_BROADCAST, K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_TO_ALL } coll_kind;

/* ---- the shared segment ------------------------------------------------------- */

typedef struct rank_state {        /* one cache line per rank and counter */
    uint64_t arrived;              /* last step whose contribution is in the slot */
    uint64_t sig[5];               /* kind, total count, dtype, op, root of that step */
    char pad1[LINE - 6 * sizeof(uint64_t)];
    uint64_t pid, pid_ns, start;   /* the rank's process (see DEAD PEERS); pid 0 until it joins */
    char pad3[LINE - 3 * sizeof(uint64_t)];
    uint64_t finished;             /* last step this rank has read every slot of */
    char pad2[LINE - sizeof(uint64_t)];
} rank_state;

typedef struct mailbox_state {
    uint64_t sent;                 /* chunks put in the mailbox */
    uint64_t taken;                /* chunks the receiver took out */
    uint64_t total_bytes, dtype;   /* of the send the current chunk belongs to */
    uint64_t bytes;                /* in the current chunk */
    char pad[LINE - 5 * sizeof(uint64_t)];
} mailbox_state;

typedef struct segment_header {
    uint64_t joined;               /* ranks that opened the segment */
    char pad[LINE - sizeof(uint64_t)];
    rank_state ranks[MAX_RANKS];
    mailbox_state mail[MAX_RANKS][MAX_RANKS];   /* [sender][receiver] */
} segment_header;

struct fl_comm_impl {
    uint64_t magic;
    int32_t device, rank, size;
    uint64_t timeout_ns;
    char *base;                    /* the mapping */
    size_t length;
    segment_header *hdr;
    uint64_t step;                 /* guarded by lock */
    fl_status broken;              /* after a timeout: every later collective fails with it */
    pthread_mutex_t lock;          /* serialises collectives */
    pthread_mutex_t send_lock[MAX_RANKS], recv_lock[MAX_RANKS];
    uint64_t refs;                 /* the handle + queued work; the last one unmaps */
};

static char *slot_of(fl_comm c, int32_t r) { return c->base + sizeof(segment_header) + (size_t)r * SLOT_BYTES; }

static char *mailbox_of(fl_comm c, int32_t from, int32_t to) {
    return c->base + sizeof(segment_header) + (size_t)c->size * SLOT_BYTES +
           ((size_t)from * (size_t)c->size + (size_t)to) * MAILBOX_BYTES;
}

static size_t segment_length(int32_t size) {
    return sizeof(segment_header) + (size_t)size * SLOT_BYTES + (size_t)size * (size_t)size * MAILBOX_BYTES;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spin briefly, then yield, then sleep: the peers are other processes that may
 * share the cores. */
static void backoff(uint32_t *round) {
    uint32_t n = (*round)++;
    if (n < 256) {
        __builtin_ia32_pause();
    } else if (n < 1024) {
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* ---- whether a peer's process still runs (see DEAD PEERS) ------------------------- */

/* The inode of this process's pid namespace; 0 where /proc does not say. */
static uint64_t pid_namespace(void) {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* State letter and start time (clock ticks since boot) of `pid` from /proc/<pid>/stat;
 * 0 when the file cannot be read (no such process, or no /proc). */
static int process_state(uint64_t pid, uint64_t *start) {
    char path[48], text[512];
    snprintf(path, sizeof path, "/proc/%llu/stat", (unsigned long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *p = strrchr(text, ')');  /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ')
        return 0;
    int state = p[2];
    /* Fields after the state: ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime. */
    p += 3;
    for (int field = 0; field < 18 && p; field++)
        p = strchr(p + 1, ' ');
    *start = p ? strtoull(p + 1, NULL, 10) : 0;
    return state;
}

static void record_self(rank_state *me) {
    uint64_t start = 0;
    uint64_t pid = (uint64_t)getpid();
    process_state(pid, &start);
    me->pid_ns = pid_namespace();
    me->start = start;
    __atomic_store_n(&me->pid, pid, __ATOMIC_RELEASE);
}

/* 0 when rank r's process is gone (exited, a zombie, or its pid now another process's). */
static int peer_alive(fl_comm c, int32_t r) {
    const rank_state *peer = &c->hdr->ranks[r];
    uint64_t pid = __atomic_load_n(&peer->pid, __ATOMIC_ACQUIRE);
    if (pid == 0 || peer->pid_ns != c->hdr->ranks[c->rank].pid_ns || peer->pid_ns == 0)
        return 1;                  /* not joined yet, or not ours to judge */
    uint64_t start = 0;
    int state = process_state(pid, &start);
    if (state == 0)
        return kill((pid_t)pid, 0) == 0 || errno == EPERM;
    return state != 'Z' && state != 'X' && (peer->start == 0 || start == peer->start);
}

enum { WAIT_DONE = 0, WAIT_EXPIRED = -1, WAIT_PEER_DEAD = -2 };

/* Wait until *word >= target, which rank `peer` advances (-1: no one to watch). */
static int wait_at_least(fl_comm c, int32_t peer, const uint64_t *word, uint64_t target, uint64_t deadline) {
    uint32_t round = 0;
    uint64_t next_check = 0;
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < target) {
        if ((round & 63) == 0) {
            uint64_t now = now_ns();
            if (now > deadline)
                return WAIT_EXPIRED;
            if (peer >= 0 && now >= next_check) {
                if (next_check != 0 && !peer_alive(c, peer))
                    return __atomic_load_n(word, __ATOMIC_ACQUIRE) < target ? WAIT_PEER_DEAD : WAIT_DONE;
                next_check = now + PEER_CHECK_NS;
            }
        }
        backoff(&round);
    }
    return WAIT_DONE;
}

/* The reason a wait on rank r failed, for the message. */
static const char *wait_failure(fl_comm c, int wait, int32_t r, char *buf, size_t cap) {
    if (wait == WAIT_PEER_DEAD)
        snprintf(buf, cap, "rank %d (pid %llu) died", r, (unsigned long long)c->hdr->ranks[r].pid);
    else
        snprintf(buf, cap, "rank %d did not arrive within %llu ms", r,
                 (unsigned long long)(c->timeout_ns / 1000000ull));
    return buf;
}

static void comm_release(fl_comm c) {
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    munmap(c->base, c->length);
    pthread_mutex_destroy(&c->lock);
    for (int i = 0; i < MAX_RANKS; i++) {
        pthread_mutex_destroy(&c->send_lock[i]);
        pthread_mutex_destroy(&c->recv_lock[i]);
    }
    free(c);
}

/* ---- dtypes and reductions ------------------------------------------------------ */

#define COLL_DTYPES                                                                            \
    (FLK_DT(FL_FLOAT32) | FLK_DT(FL_FLOAT64) | FLK_DT(FL_FLOAT16) | FLK_DT(FL_BFLOAT16) |      \
     FLK_DT(FL_INT8) | FLK_DT(FL_UINT8) | FLK_DT(FL_INT16) | FLK_DT(FL_INT32) | FLK_DT(FL_INT64))
#define COLL_OPS                                                                               \
    ((1u << FL_REDUCE_SUM) | (1u << FL_REDUCE_PROD) | (1u << FL_REDUCE_MIN) |                  \
     (1u << FL_REDUCE_MAX) | (1u << FL_REDUCE_AVG))

static size_t elem_size(int32_t dtype) {
    switch (dtype) {
    case FL_FLOAT64: case FL_INT64: return 8;
    case FL_FLOAT32: case FL_INT32: return 4;
    case FL_FLOAT16: case FL_BFLOAT16: case FL_INT16: return 2;
    default: return 1;
    }
}

static int is_floating(int32_t dtype) {
    return dtype == FL_FLOAT32 || dtype == FL_FLOAT64 || dtype == FL_FLOAT16 || dtype == FL_BFLOAT16;
}

#define COMBINE(acc, v, op)                                         \
    switch (op) {                                                   \
    case FL_REDUCE_PROD: acc = acc * v; break;                      \
    case FL_REDUCE_MIN: acc = v < acc ? v : acc; break;             \
    case FL_REDUCE_MAX: acc = v > acc ? v : acc; break;             \
    default: acc = acc + v; break;                                  \
    }

/* out[i] = op over ranks r (in rank order) of src[r][i], for n elements of T. */
#define DEFINE_REDUCE(NAME, T, ACC)                                                            \
    static void NAME(void *out, const char *const *src, int32_t ranks, size_t n, int32_t op) { \
        for (size_t i = 0; i < n; i++) {                                                       \
            ACC acc = (ACC)((const T *)src[0])[i];                                             \
            for (int32_t r = 1; r < ranks; r++) {                                              \
                ACC v = (ACC)((const T *)src[r])[i];                                           \
                COMBINE(acc, v, op)                                                            \
            }                                                                                  \
            if (op == FL_REDUCE_AVG)                                                           \
                acc = acc / (ACC)ranks;                                                        \
            ((T *)out)[i] = (T)acc;                                                            \
        }                                                                                      \
    }
DEFINE_REDUCE(reduce_f32, float, float)
DEFINE_REDUCE(reduce_f64, double, double)
DEFINE_REDUCE(reduce_i8, int8_t, int8_t)
DEFINE_REDUCE(reduce_u8, uint8_t, uint8_t)
DEFINE_REDUCE(reduce_i16, int16_t, int16_t)
DEFINE_REDUCE(reduce_i32, int32_t, int32_t)
DEFINE_REDUCE(reduce_i64, int64_t, int64_t)

/* Halves: accumulated in float32 and rounded once, as PyTorch's CPU reductions do. */
#define DEFINE_REDUCE_HALF(NAME, TO_F, FROM_F)                                                  \
    static void NAME(void *out, const char *const *src, int32_t ranks, size_t n, int32_t op) { \
        for (size_t i = 0; i < n; i++) {                                                       \
            float acc = TO_F(((const uint16_t *)src[0])[i]);                                   \
            for (int32_t r = 1; r < ranks; r++) {                                              \
                float v = TO_F(((const uint16_t *)src[r])[i]);                                 \
                COMBINE(acc, v, op)                                                            \
            }                                                                                  \
            if (op == FL_REDUCE_AVG)                                                           \
                acc = acc / (float)ranks;                                                      \
            ((uint16_t *)out)[i] = FROM_F(acc);                                                \
        }                                                                                      \
    }
DEFINE_REDUCE_HALF(reduce_f16, flk_half_to_float, flk_float_to_half)
DEFINE_REDUCE_HALF(reduce_bf16, flk_bf16_to_float, flk_float_to_bf16)

/* Integer sums and products wrap as PyTorch's do (two's complement); signed
 * overflow is undefined in C, so they are computed in the unsigned type of the
 * same width.  Min and max use the plain loop above. */
#define DEFINE_REDUCE_INT(NAME, T, U)                                                          \
    static void NAME(void *out, const char *const *src, int32_t ranks, size_t n, int32_t op) { \
        if (op == FL_REDUCE_MIN || op == FL_REDUCE_MAX) {                                      \
            NAME##_ordered(out, src, ranks, n, op);                                            \
            return;                                                                            \
        }                                                                                      \
        for (size_t i = 0; i < n; i++) {                                                       \
            U acc = (U)((const T *)src[0])[i];                                                 \
            for (int32_t r = 1; r < ranks; r++) {                                              \
                U v = (U)((const T *)src[r])[i];                                               \
                acc = op == FL_REDUCE_PROD ? (U)(acc * v) : (U)(acc + v);                      \
            }                                                                                  \
            ((T *)out)[i] = (T)acc;                                                            \
        }                                                                                      \
    }
#define reduce_i8i_ordered reduce_i8
#define reduce_u8i_ordered reduce_u8
#define reduce_i16i_ordered reduce_i16
#define reduce_i32i_ordered reduce_i32
#define reduce_i64i_ordered reduce_i64
DEFINE_REDUCE_INT(reduce_i8i, int8_t, uint8_t)
DEFINE_REDUCE_INT(reduce_u8i, uint8_t, uint8_t)
DEFINE_REDUCE_INT(reduce_i16i, int16_t, uint16_t)
DEFINE_REDUCE_INT(reduce_i32i, int32_t, uint32_t)
DEFINE_REDUCE_INT(reduce_i64i, int64_t, uint64_t)

typedef void (*reduce_fn)(void *, const char *const *, int32_t, size_t, int32_t);

static reduce_fn reducer(int32_t dtype) {
    switch (dtype) {
    case FL_FLOAT32: return reduce_f32;
    case FL_FLOAT64: return reduce_f64;
    case FL_FLOAT16: return reduce_f16;
    case FL_BFLOAT16: return reduce_bf16;
    case FL_INT8: return reduce_i8i;
    case FL_UINT8: return reduce_u8i;
    case FL_INT16: return reduce_i16i;
    case FL_INT32: return reduce_i32i;
    default: return reduce_i64i;
    }
}

/* ---- one collective, run on the stream's worker ------------------------------------ */

typedef struct coll_job {
    fl_comm comm;
    coll_kind kind;
    int32_t dtype, op, root;
    uint64_t count;                /* the signature's count: what every rank must pass alike */
    uint64_t send_elems;           /* elements of `send` this rank contributes */
    const char *send;              /* private host views of the device buffers */
    char *recv;
} coll_job;

/* Whether this rank puts its send elements in its slot (a broadcast's root only). */
static int contributes(const coll_job *j) {
    return j->kind != K_BROADCAST || j->comm->rank == j->root;
}

/* Compute this rank's output for send elements [a, a+n) from all slots. */
static void combine_step(const coll_job *j, uint64_t a, uint64_t n) {
    fl_comm c = j->comm;
    size_t es = elem_size(j->dtype);
    const char *src[MAX_RANKS];
    for (int32_t r = 0; r < c->size; r++)
        src[r] = slot_of(c, r);
    switch (j->kind) {
    case K_ALL_REDUCE:
        reducer(j->dtype)(j->recv + a * es, src, c->size, n, j->op);
        break;
    case K_BROADCAST:
        memcpy(j->recv + a * es, src[j->root], n * es);
        break;
    case K_ALL_GATHER:
        for (int32_t r = 0; r < c->size; r++)
            memcpy(j->recv + ((uint64_t)r * j->count + a) * es, src[r], n * es);
        break;
    case K_REDUCE_SCATTER: {       /* my block: [rank*count, (rank+1)*count) of the flat send */
        uint64_t lo = (uint64_t)c->rank * j->count, hi = lo + j->count;
        uint64_t from = a > lo ? a : lo, to = a + n < hi ? a + n : hi;
        if (from >= to)
            break;
        const char *part[MAX_RANKS];
        for (int32_t r = 0; r < c->size; r++)
            part[r] = src[r] + (from - a) * es;
        reducer(j->dtype)(j->recv + (from - lo) * es, part, c->size, to - from, j->op);
        break;
    }
    case K_ALL_TO_ALL: {           /* from every rank r, its block `rank`, into my block r */
        uint64_t lo = (uint64_t)c->rank * j->count, hi = lo + j->count;
        uint64_t from = a > lo ? a : lo, to = a + n < hi ? a + n : hi;
        if (from >= to)
            break;
        for (int32_t r = 0; r < c->size; r++)
            memcpy(j->recv + ((uint64_t)r * j->count + (from - lo)) * es, src[r] + (from - a) * es,
                   (to - from) * es);
        break;
    }
    }
}

static const char *kind_name(uint64_t kind) {
    static const char *const names[] = {"?", "all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                        "all_to_all"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

/* One step: contribute, wait for all, check signatures, combine, wait for all to finish. */
static fl_status run_step(const coll_job *j, uint64_t a, uint64_t n, char *message, size_t cap) {
    fl_comm c = j->comm;
    rank_state *me = &c->hdr->ranks[c->rank];
    size_t es = elem_size(j->dtype);
    uint64_t step = ++c->step;
    uint64_t sig[5] = {j->kind, j->count, (uint64_t)j->dtype, (uint64_t)j->op, (uint64_t)j->root};
    if (contributes(j) && n > 0)
        memcpy(slot_of(c, c->rank), j->send + a * es, n * es);
    memcpy(me->sig, sig, sizeof sig);
    __atomic_store_n(&me->arrived, step, __ATOMIC_RELEASE);
    uint64_t deadline = now_ns() + c->timeout_ns;
    char why[96];
    for (int32_t r = 0; r < c->size; r++) {
        int wait = wait_at_least(c, r, &c->hdr->ranks[r].arrived, step, deadline);
        if (wait != WAIT_DONE) {
            c->broken = FL_ERROR_TIMEOUT;
            snprintf(message, cap, "%s on rank %d of %d (device %d): %s", kind_name(j->kind), c->rank, c->size,
                     c->device, wait_failure(c, wait, r, why, sizeof why));
            return FL_ERROR_TIMEOUT;
        }
    }
    fl_status st = FL_SUCCESS;
    for (int32_t r = 0; r < c->size && st == FL_SUCCESS; r++) {
        const uint64_t *theirs = c->hdr->ranks[r].sig;
        if (memcmp(theirs, sig, sizeof sig) != 0) {
            st = FL_ERROR_COLLECTIVE_MISMATCH;
            snprintf(message, cap,
                     "rank %d of %d called %s(count=%llu, dtype=%llu, op=%llu, root=%llu) while rank %d "
                     "called %s(count=%llu, dtype=%llu, op=%llu, root=%llu): every rank must make the same "
                     "collectives in the same order",
                     c->rank, c->size, kind_name(sig[0]), (unsigned long long)sig[1],
                     (unsigned long long)sig[2], (unsigned long long)sig[3], (unsigned long long)sig[4], r,
                     kind_name(theirs[0]), (unsigned long long)theirs[1], (unsigned long long)theirs[2],
                     (unsigned long long)theirs[3], (unsigned long long)theirs[4]);
        }
    }
    if (st == FL_SUCCESS && n > 0)
        combine_step(j, a, n);
    __atomic_store_n(&me->finished, step, __ATOMIC_RELEASE);
    for (int32_t r = 0; r < c->size; r++) {
        int wait = wait_at_least(c, r, &c->hdr->ranks[r].finished, step, deadline);
        if (wait != WAIT_DONE) {
            c->broken = FL_ERROR_TIMEOUT;
            snprintf(message, cap, "%s on rank %d of %d: %s before finishing the step", kind_name(j->kind),
                     c->rank, c->size, wait_failure(c, wait, r, why, sizeof why));
            return FL_ERROR_TIMEOUT;
        }
    }
    return st;
}

static fl_status run_collective(void *obj, char *message, size_t cap) {
    coll_job *j = obj;
    fl_comm c = j->comm;
    pthread_mutex_lock(&c->lock);
    fl_status st = c->broken;
    if (st != FL_SUCCESS)
        snprintf(message, cap, "%s: the communicator (rank %d of %d) broke after an earlier timeout; "
                 "destroy it and create a new one", kind_name(j->kind), c->rank, c->size);
    uint64_t per_step = SLOT_BYTES / elem_size(j->dtype);
    /* At least one step even for count 0, so that a mismatch is still found. */
    for (uint64_t a = 0; st == FL_SUCCESS && (a < j->send_elems || a == 0); a += per_step) {
        uint64_t n = j->send_elems - a < per_step ? j->send_elems - a : per_step;
        st = run_step(j, a, n, message, cap);
        if (j->send_elems == 0)
            break;
    }
    pthread_mutex_unlock(&c->lock);
    comm_release(c);
    free(j);
    return st;
}

/* ---- point to point ------------------------------------------------------------------ */

typedef struct p2p_job {
    fl_comm comm;
    int send;                      /* 1: send to peer, 0: receive from it */
    int32_t peer, dtype;
    uint64_t bytes;
    char *data;
} p2p_job;

static fl_status run_send(p2p_job *j, char *message, size_t cap) {
    fl_comm c = j->comm;
    mailbox_state *box = &c->hdr->mail[c->rank][j->peer];
    char *buffer = mailbox_of(c, c->rank, j->peer);
    uint64_t deadline = now_ns() + c->timeout_ns;
    uint64_t done = 0;
    do {
        uint64_t sent = __atomic_load_n(&box->sent, __ATOMIC_ACQUIRE);
        int wait = wait_at_least(c, j->peer, &box->taken, sent, deadline);
        if (wait != WAIT_DONE) {
            char why[96];
            snprintf(message, cap, "send from rank %d to rank %d: the receiver did not take the data (%s)",
                     c->rank, j->peer, wait_failure(c, wait, j->peer, why, sizeof why));
            return FL_ERROR_TIMEOUT;
        }
        uint64_t n = j->bytes - done < MAILBOX_BYTES ? j->bytes - done : MAILBOX_BYTES;
        memcpy(buffer, j->data + done, n);
        box->total_bytes = j->bytes;
        box->dtype = (uint64_t)j->dtype;
        box->bytes = n;
        __atomic_store_n(&box->sent, sent + 1, __ATOMIC_RELEASE);
        done += n;
    } while (done < j->bytes);
    return FL_SUCCESS;
}

static fl_status run_recv(p2p_job *j, char *message, size_t cap) {
    fl_comm c = j->comm;
    mailbox_state *box = &c->hdr->mail[j->peer][c->rank];
    const char *buffer = mailbox_of(c, j->peer, c->rank);
    uint64_t deadline = now_ns() + c->timeout_ns;
    uint64_t done = 0;
    do {
        uint64_t taken = __atomic_load_n(&box->taken, __ATOMIC_ACQUIRE);
        int wait = wait_at_least(c, j->peer, &box->sent, taken + 1, deadline);
        if (wait != WAIT_DONE) {
            char why[96];
            snprintf(message, cap, "recv on rank %d from rank %d: nothing arrived (%s)", c->rank, j->peer,
                     wait_failure(c, wait, j->peer, why, sizeof why));
            return FL_ERROR_TIMEOUT;
        }
        if (box->total_bytes != j->bytes || box->dtype != (uint64_t)j->dtype) {
            snprintf(message, cap, "recv on rank %d from rank %d: expected %llu bytes of dtype %d, the "
                     "sender sent %llu bytes of dtype %llu", c->rank, j->peer, (unsigned long long)j->bytes,
                     j->dtype, (unsigned long long)box->total_bytes, (unsigned long long)box->dtype);
            __atomic_store_n(&box->taken, taken + 1, __ATOMIC_RELEASE);    /* drop it: the sender moves on */
            return FL_ERROR_COLLECTIVE_MISMATCH;
        }
        memcpy(j->data + done, buffer, box->bytes);
        done += box->bytes;
        __atomic_store_n(&box->taken, taken + 1, __ATOMIC_RELEASE);
    } while (done < j->bytes);
    return FL_SUCCESS;
}

static fl_status run_p2p(void *obj, char *message, size_t cap) {
    p2p_job *j = obj;
    fl_comm c = j->comm;
    pthread_mutex_t *lock = j->send ? &c->send_lock[j->peer] : &c->recv_lock[j->peer];
    pthread_mutex_lock(lock);
    fl_status st = j->bytes == 0 ? FL_SUCCESS
                 : j->send      ? run_send(j, message, cap)
                                : run_recv(j, message, cap);
    pthread_mutex_unlock(lock);
    comm_release(c);
    free(j);
    return st;
}

/* ---- enqueue-time checks ---------------------------------------------------------------- */

static fl_status check_comm(fl_comm comm, const char *call) {
    if (!comm)
        return fld_fail(FL_ERROR_INVALID_HANDLE, "%s: comm is NULL", call);
    if (comm->magic != COMM_MAGIC)
        return fld_fail(FL_ERROR_INVALID_HANDLE, "%s: %p is not a live communicator", call, (void *)comm);
    return FL_SUCCESS;
}

/* The common checks of a collective call; on success *dev is the comm's device. */
static fl_status check_call(const char *call, const void *args, size_t struct_size, size_t needed,
                            fl_comm comm, fl_stream stream, int32_t dtype, drv_device **dev) {
    if (!args)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s: args is NULL", call);
    if (struct_size < needed)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: args->struct_size=%zu, an ABI 1.1 caller passes %zu",
                        call, struct_size, needed);
    fl_status st = check_comm(comm, call);
    if (st == FL_SUCCESS)
        st = drv_stream_check(stream, call);
    if (st != FL_SUCCESS)
        return st;
    if (drv_stream_device(stream) != comm->device)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: the stream is on device %d, the communicator on device %d",
                        call, drv_stream_device(stream), comm->device);
    if (dtype < 0 || dtype >= FL_DTYPE_COUNT || !(COLL_DTYPES & FLK_DT(dtype)))
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: dtype %d is not one the collectives take (mask 0x%llx)",
                        call, dtype, (unsigned long long)COLL_DTYPES);
    *dev = drv_device_get(comm->device);
    return *dev ? FL_SUCCESS : drv_bad_device(comm->device, call);
}

static fl_status check_op(const char *call, int32_t op, int32_t dtype) {
    if (op < 0 || op > FL_REDUCE_AVG)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: op %d is not an fl_reduce_op", call, op);
    if (op == FL_REDUCE_AVG && !is_floating(dtype))
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: FL_REDUCE_AVG takes floating dtypes only, got dtype %d",
                        call, dtype);
    return FL_SUCCESS;
}

static fl_status check_rank(const char *call, const char *what, int32_t r, fl_comm comm) {
    if (r < 0 || r >= comm->size)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: %s %d is outside the communicator's ranks 0..%d", call,
                        what, r, comm->size - 1);
    return FL_SUCCESS;
}

/* The worker's view of count elements at (base, offset); NULL view for 0 bytes. */
static fl_status resolve(drv_device *dev, const char *call, const char *what, fl_devptr base, uint64_t offset,
                         uint64_t count, int32_t dtype, char **host) {
    uint64_t bytes = count * elem_size(dtype);
    *host = NULL;
    if (bytes == 0)
        return FL_SUCCESS;
    if (bytes / elem_size(dtype) != count)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: %s count %llu overflows", call, what,
                        (unsigned long long)count);
    fl_status st = fld_check_range(&drv_memory, dev->index, base, offset, bytes, call, what);
    if (st != FL_SUCCESS)
        return st;
    *host = drv_mem_host(dev, base) + offset;
    return FL_SUCCESS;
}

static fl_status enqueue_call(fl_stream stream, fl_status (*fn)(void *, char *, size_t), void *job,
                              fl_comm comm) {
    __atomic_add_fetch(&comm->refs, 1, __ATOMIC_ACQ_REL);
    drv_task t = {.kind = DRV_TASK_CALL, .u.call = {.fn = fn, .obj = job}};
    fl_status st = drv_queue_enqueue(drv_stream_queue(stream), &t);
    if (st != FL_SUCCESS) {
        comm_release(comm);
        free(job);
    }
    return st;
}

/* Resolve both buffers and queue the job. */
static fl_status enqueue_collective(const char *call, drv_device *dev, fl_stream stream, coll_job *proto,
                                    fl_devptr send_base, uint64_t send_offset, uint64_t recv_elems,
                                    fl_devptr recv_base, uint64_t recv_offset) {
    char *send = NULL, *recv = NULL;
    fl_status st = FL_SUCCESS;
    if (contributes(proto))
        st = resolve(dev, call, "send", send_base, send_offset, proto->send_elems, proto->dtype, &send);
    if (st == FL_SUCCESS)
        st = resolve(dev, call, "recv", recv_base, recv_offset, recv_elems, proto->dtype, &recv);
    if (st != FL_SUCCESS)
        return st;
    coll_job *j = malloc(sizeof *j);
    if (!j)
        return fld_fail(FL_ERROR_INTERNAL, "%s: out of host memory", call);
    *j = *proto;
    j->send = send;
    j->recv = recv;
    return enqueue_call(stream, run_collective, j, proto->comm);
}

/* ---- the extension's functions ------------------------------------------------------------ */

static fl_status comm_get_unique_id(fl_comm_get_unique_id_args *a) {
    static const char call[] = "comm_get_unique_id";
    if (!a || !a->unique_id)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s: args or args->unique_id is NULL", call);
    if (a->struct_size < FL_STRUCT_SIZE(fl_comm_get_unique_id_args, unique_id))
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: args->struct_size=%zu is too small", call, a->struct_size);
    if (!drv_device_get(a->device))
        return drv_bad_device(a->device, call);
    uint64_t salt;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &salt, sizeof salt) != (ssize_t)sizeof salt)
        salt = now_ns() ^ ((uint64_t)getpid() << 32);
    if (fd >= 0)
        close(fd);
    memset(a->unique_id, 0, sizeof *a->unique_id);
    snprintf(a->unique_id->internal, sizeof a->unique_id->internal, "%s:/flref-%d-%016llx", ID_MAGIC,
             (int)getpid(), (unsigned long long)salt);
    return FL_SUCCESS;
}

/* The segment name inside a unique id, or NULL when the id is not ours. */
static const char *segment_name(const fl_comm_unique_id *id) {
    size_t magic = strlen(ID_MAGIC);
    if (memchr(id->internal, '\0', sizeof id->internal) == NULL ||
        strncmp(id->internal, ID_MAGIC ":/", magic + 2) != 0)
        return NULL;
    return id->internal + magic + 1;
}

static fl_status open_segment(fl_comm c, const char *name, const char *call) {
    int fd = shm_open(name, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return fld_fail(FL_ERROR_DRIVER, "%s: shm_open(%s): %s", call, name, strerror(errno));
    int bad = ftruncate(fd, (off_t)c->length) != 0;    /* every rank sets the same size */
    void *p = bad ? MAP_FAILED : mmap(NULL, c->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(name);
        return fld_fail(FL_ERROR_DRIVER, "%s: mapping %zu bytes of %s: %s", call, c->length, name, strerror(err));
    }
    c->base = p;
    c->hdr = p;
    return FL_SUCCESS;
}

/* FL_REFERENCE_COMM_LOG=<path>: one line per communicator made, "<segment> rank <r> size <n> pid
 * <pid>", appended with one write() so that the processes sharing the file do not interleave.
 * Instrumentation for tests (which processes each communicator joined), not ABI. */
static void log_comm(const char *name, const struct fl_comm_impl *c) {
    const char *path = getenv("FL_REFERENCE_COMM_LOG");
    if (!path || !*path)
        return;
    char line[160];
    int n = snprintf(line, sizeof line, "%s rank %d size %d pid %d\n", name, c->rank, c->size, (int)getpid());
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || n <= 0 || (size_t)n >= sizeof line) {
        if (fd >= 0)
            close(fd);
        return;
    }
    ssize_t written = write(fd, line, (size_t)n);
    (void)written;
    close(fd);
}

static fl_status comm_create(fl_comm_create_args *a) {
    static const char call[] = "comm_create";
    if (!a || !a->unique_id)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s: args or args->unique_id is NULL", call);
    if (a->struct_size < FL_STRUCT_SIZE(fl_comm_create_args, comm))
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: args->struct_size=%zu is too small", call, a->struct_size);
    a->comm = NULL;
    if (!drv_device_get(a->device))
        return drv_bad_device(a->device, call);
    if (a->size < 1 || a->size > MAX_RANKS || a->rank < 0 || a->rank >= a->size)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: rank %d of size %d: size must be 1..%d and rank 0..size-1",
                        call, a->rank, a->size, MAX_RANKS);
    const char *name = segment_name(a->unique_id);
    if (!name)
        return fld_fail(FL_ERROR_INVALID_VALUE, "%s: the unique id was not made by this plugin's "
                        "comm_get_unique_id", call);
    fl_comm c = calloc(1, sizeof *c);
    if (!c)
        return fld_fail(FL_ERROR_INTERNAL, "%s: out of host memory", call);
    c->device = a->device;
    c->rank = a->rank;
    c->size = a->size;
    c->timeout_ns = (uint64_t)(a->timeout_ms ? a->timeout_ms : DEFAULT_TIMEOUT_MS) * 1000000ull;
    c->length = segment_length(a->size);
    fl_status st = open_segment(c, name, call);
    if (st != FL_SUCCESS) {
        free(c);
        return st;
    }
    record_self(&c->hdr->ranks[a->rank]);
    __atomic_add_fetch(&c->hdr->joined, 1, __ATOMIC_ACQ_REL);
    if (wait_at_least(c, -1, &c->hdr->joined, (uint64_t)a->size, now_ns() + c->timeout_ns) != 0) {
        uint64_t joined = __atomic_load_n(&c->hdr->joined, __ATOMIC_ACQUIRE);
        shm_unlink(name);
        munmap(c->base, c->length);
        free(c);
        return fld_fail(FL_ERROR_TIMEOUT, "%s: rank %d waited %u ms for %d ranks, %llu joined", call, a->rank,
                        a->timeout_ms ? a->timeout_ms : DEFAULT_TIMEOUT_MS, a->size, (unsigned long long)joined);
    }
    if (a->rank == 0)
        shm_unlink(name);          /* everyone has it mapped: nothing stays in /dev/shm */
    pthread_mutex_init(&c->lock, NULL);
    for (int i = 0; i < MAX_RANKS; i++) {
        pthread_mutex_init(&c->send_lock[i], NULL);
        pthread_mutex_init(&c->recv_lock[i], NULL);
    }
    c->refs = 1;
    c->magic = COMM_MAGIC;
    a->comm = c;
    log_comm(name, c);
    return FL_SUCCESS;
}

static fl_status comm_destroy(fl_comm_destroy_args *a) {
    static const char call[] = "comm_destroy";
    if (!a)
        return fld_fail(FL_ERROR_INVALID_POINTER, "%s: args is NULL", call);
    fl_status st = check_comm(a->comm, call);
    if (st != FL_SUCCESS)
        return st;
    a->comm->magic = 0;
    comm_release(a->comm);         /* queued work holds references of its own */
    return FL_SUCCESS;
}

static fl_status all_reduce(fl_all_reduce_args *a) {
    static const char call[] = "all_reduce";
    drv_device *dev;
    fl_status st = check_call(call, a, a ? a->struct_size : 0, FL_STRUCT_SIZE(fl_all_reduce_args, op),
                              a ? a->comm : NULL, a ? a->stream : NULL, a ? a->dtype : 0, &dev);
    if (st == FL_SUCCESS)
        st = check_op(call, a->op, a->dtype);
    if (st != FL_SUCCESS)
        return st;
    coll_job j = {.comm = a->comm, .kind = K_ALL_REDUCE, .dtype = a->dtype, .op = a->op, .count = a->count,
                  .send_elems = a->count};
    return enqueue_collective(call, dev, a->stream, &j, a->send_base, a->send_offset, a->count, a->recv_base,
                              a->recv_offset);
}

static fl_status broadcast(fl_broadcast_args *a) {
    static const char call[] = "broadcast";
    drv_device *dev;
    fl_status st = check_call(call, a, a ? a->struct_size : 0, FL_STRUCT_SIZE(fl_broadcast_args, root),
                              a ? a->comm : NULL, a ? a->stream : NULL, a ? a->dtype : 0, &dev);
    if (st == FL_SUCCESS)
        st = check_rank(call, "root", a->root, a->comm);
    if (st != FL_SUCCESS)
        return st;
    coll_job j = {.comm = a->comm, .kind = K_BROADCAST, .dtype = a->dtype, .root = a->root, .count = a->count,
                  .send_elems = a->count};
    return enqueue_collective(call, dev, a->stream, &j, a->send_base, a->send_offset, a->count, a->recv_base,
                              a->recv_offset);
}

static fl_status all_gather(fl_all_gather_args *a) {
    static const char call[] = "all_gather";
    drv_device *dev;
    fl_status st = check_call(call, a, a ? a->struct_size : 0, FL_STRUCT_SIZE(fl_all_gather_args, dtype),
                              a ? a->comm : NULL, a ? a->stream : NULL, a ? a->dtype : 0, &dev);
    if (st != FL_SUCCESS)
        return st;
    coll_job j = {.comm = a->comm, .kind = K_ALL_GATHER, .dtype = a->dtype, .count = a->send_count,
                  .send_elems = a->send_count};
    return enqueue_collective(call, dev, a->stream, &j, a->send_base, a->send_offset,
                              a->send_count * (uint64_t)a->comm->size, a->recv_base, a->recv_offset);
}

static fl_status reduce_scatter(fl_reduce_scatter_args *a) {
    static const char call[] = "reduce_scatter";
    drv_device *dev;
    fl_status st = check_call(call, a, a ? a->struct_size : 0, FL_STRUCT_SIZE(fl_reduce_scatter_args, op),
                              a ? a->comm : NULL, a ? a->stream : NULL, a ? a->dtype : 0, &dev);
    if (st == FL_SUCCESS)
        st = check_op(call, a->op, a->dtype);
    if (st != FL_SUCCESS)
        return st;
    coll_job j = {.comm = a->comm, .kind = K_REDUCE_SCATTER, .dtype = a->dtype, .op = a->op,
                  .count = a->recv_count, .send_elems = a->recv_count * (uint64_t)a->comm->size};
    return enqueue_collective(call, dev, a->stream, &j, a->send_base, a->send_offset, a->recv_count,
                              a->recv_base, a->recv_offset);
}

static fl_status all_to_all(fl_all_to_all_args *a) {
    static const char call[] = "all_to_all";
    drv_device *dev;
    fl_status st = check_call(call, a, a ? a->struct_size : 0, FL_STRUCT_SIZE(fl_all_to_all_args, dtype),
                              a ? a->comm : NULL, a ? a->stream : NULL, a ? a->dtype : 0, &dev);
    if (st != FL_SUCCESS)
        return st;
    uint64_t total = a->count * (uint64_t)a->comm->size;
    coll_job j = {.comm = a->comm, .kind = K_ALL_TO_ALL, .dtype = a->dtype, .count = a->count,
                  .send_elems = total};
    return enqueue_collective(call, dev, a->stream, &j, a->send_base, a->send_offset, total, a->recv_base,
                              a->recv_offset);
}

static fl_status enqueue_p2p(const char *call, int is_send, fl_comm comm, fl_stream stream, fl_devptr base,
                             uint64_t offset, uint64_t count, int32_t dtype, int32_t peer, drv_device *dev) {
    fl_status st = check_rank(call, "peer", peer, comm);
    if (st == FL_SUCCESS && peer == comm->rank)
        st = fld_fail(FL_ERROR_INVALID_VALUE, "%s: peer %d is the calling rank itself", call, peer);
    char *data;
    if (st == FL_SUCCESS)
        st = resolve(dev, call, is_send ? "send" : "recv", base, offset, count, dtype, &data);
    if (st != FL_SUCCESS)
        return st;
    p2p_job *j = malloc(sizeof *j);
    if (!j)
        return fld_fail(FL_ERROR_INTERNAL, "%s: out of host memory", call);
    *j = (p2p_job){.comm = comm, .send = is_send, .peer = peer, .dtype = dtype,
                   .bytes = count * elem_size(dtype), .data = data};
    return enqueue_call(stream, run_p2p, j, comm);
}

static fl_status send_fn(fl_send_args *a) {
    drv_device *dev;
    fl_status st = check_call("send", a, a ? a->struct_size : 0, FL_STRUCT_SIZE(fl_send_args, peer),
                              a ? a->comm : NULL, a ? a->stream : NULL, a ? a->dtype : 0, &dev);
    return st != FL_SUCCESS ? st : enqueue_p2p("send", 1, a->comm, a->stream, a->send_base, a->send_offset,
                                               a->count, a->dtype, a->peer, dev);
}

static fl_status recv_fn(fl_recv_args *a) {
    drv_device *dev;
    fl_status st = check_call("recv", a, a ? a->struct_size : 0, FL_STRUCT_SIZE(fl_recv_args, peer),
                              a ? a->comm : NULL, a ? a->stream : NULL, a ? a->dtype : 0, &dev);
    return st != FL_SUCCESS ? st : enqueue_p2p("recv", 0, a->comm, a->stream, a->recv_base, a->recv_offset,
                                               a->count, a->dtype, a->peer, dev);
}

const fl_collectives_extension drv_collectives_extension = {
    .base = {.struct_size = sizeof(fl_collectives_extension), .type = FL_EXTENSION_COLLECTIVES, .next = NULL},
    .dtypes = COLL_DTYPES,
    .reduce_ops = COLL_OPS,
    .max_ranks = MAX_RANKS,
    .comm_get_unique_id = comm_get_unique_id,
    .comm_create = comm_create,
    .comm_destroy = comm_destroy,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .all_gather = all_gather,
    .reduce_scatter = reduce_scatter,
    .all_to_all = all_to_all,
    .send = send_fn,
    .recv = recv_fn,
    .reach = FL_COMM_REACH_HOST, /* POSIX shared memory: only processes of one host meet */
};
