"""The thread pool that runs a CPU kernel's THREAD loop: C source, built once and loaded before any kernel.

ClangRenderer outlines the body of a kernel's THREAD loop into a function of one iteration (a "chunk") and calls
it through the function pointer `tg_parallel(chunk, args, n, threads)` that each kernel library defines. The CPU
device (tg_runtime.ops_cpu) compiles this library with the kernels' compiler, loads it once, and points every
kernel library's `tg_parallel` at its `tg_pool_run` (no symbol is left for the dynamic linker to resolve).

How a call runs:
- the caller publishes the job in one 64-bit word (generation, chunk count, next chunk) and takes chunks itself;
- workers (threads - 1 of them, started on first use) spin for a while on that word after their last job, then
  sleep on a condition variable; a job wakes sleepers only when there are some;
- every participant claims the next chunk with a compare-and-swap, so a worker that is slow to wake (a machine
  busy with other work) never holds the kernel up: the others run its chunks. The call returns when every chunk
  is done (the caller spins briefly on the last ones, then yields its core, which a preempted worker may need);
  a worker that comes late finds none left.
- one job at a time: a second caller (another Python thread) runs its chunks alone, in order.
- after fork() the child has no workers: its first job starts them again.
- `tg_pool_wake()` (called when a realize starts, Device.prepare) wakes sleeping workers ahead of the first launch:
  waking 15 sleeping threads took ~150-250 us on the 16-core Xeon host (a 256x256 matmul's kernel: 54 us), which
  now overlaps the scheduling in Python. It also keeps spinning workers spinning WAKE_SPIN_US past it: a program
  that realizes every ~1 ms (an eager loop making its inputs in between) finds its workers awake at each launch,
  not asleep because the last *threaded* launch was SPIN_US ago (on the shared 2-core VM the worker then slept
  through 256x256 matmuls, waking a halted vCPU too late to take a chunk: 300 us kernels instead of 155).
- a worker that finds itself on its caller's CPU (or on another worker's) moves to one nobody here uses: Linux may
  wake a thread on its waker's CPU though another is idle, and the two then take turns on one core.
- `tg_pool_sleeping()`, `tg_pool_naps()`, `tg_pool_moves()`: how many workers sleep now, how often one went to
  sleep, how often one moved (tests, diagnostics).
Measured per call on a 2-core EPYC with the workers spinning: ~1-2 us (bench/bench_cpu.py `thread_overhead`).

>>> "void tg_pool_run(" in THREAD_POOL_C
True
"""

from __future__ import annotations

# how long an idle worker spins on the job word before it sleeps (microseconds): long enough to span the Python work
# between two eager ops (a 256x256 matmul with fresh inputs every ~1 ms on 2 cores: 356 us per realize with 300 us of
# spinning, 217 with 2 ms, 215 with 20 ms; OpenMP and OpenBLAS spin longer), short enough to leave a quiet program's
# cores alone soon
SPIN_US = 2000
# how long a worker woken ahead of a launch (tg_pool_wake, when a realize starts) spins for it: the Python between a
# realize's start and its first launch is ~10-100 us when its schedule is known; a program that realizes only tiny
# single-threaded kernels now and then keeps the workers busy this long after each, not SPIN_US
WAKE_SPIN_US = 1000

THREAD_POOL_C = r"""
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getcpu, pthread_{get,set}affinity_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#define tg_pause() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define tg_pause() __asm__ volatile("yield")
#else
#define tg_pause() ((void)0)
#endif

typedef void (*tg_chunk_fn)(void *args, int chunk);

#define TG_MAX_WORKERS 255
#define TG_NO_CPU (-1)
#define TG_CHUNK_BITS 20
#define TG_CHUNK_MASK ((1ull << TG_CHUNK_BITS) - 1)

static struct {
  _Atomic uint64_t job;   /* generation (24 bits) | chunks (20) | next chunk (20) */
  tg_chunk_fn fn;
  void *args;
  _Atomic int done;       /* chunks finished in this generation */
  _Atomic int sleepers;
  _Atomic unsigned wakes; /* tg_pool_wake calls: a sleeper woken by one spins again without a job */
  _Atomic uint64_t wake_us; /* when tg_pool_wake was last called (microseconds): spinners spin past it */
  _Atomic int cpu[TG_MAX_WORKERS + 1]; /* the CPU of the caller [0] and of each awake worker [1 + i], or TG_NO_CPU */
  _Atomic int moves;      /* workers moved off a CPU they shared (tg_pool_moves: tests) */
  _Atomic int naps;       /* times a worker chose to sleep (tg_pool_naps: tests) */
  int workers;
  pthread_mutex_t lock, busy;
  pthread_cond_t wake;
  int ready;
} tg_pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .busy = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static double tg_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

#if defined(__linux__)
static int tg_cpu_now(void) { return sched_getcpu(); }

/* Worker `me` shares its CPU with the caller (or with a worker before it): move to a CPU nobody here uses (else to
   any but the caller's), by leaving the shared one out of this thread's affinity for a moment. Linux wakes a thread
   on its waker's CPU when it judges that cheaper, and a spinning worker there takes the caller's core: on a 2-core
   VM the worker and the Python thread shared one CPU after ~60% of wakes while the other stayed idle (1 ms slices
   each: kernels at one thread's speed, 1-2.5 ms stalls). */
static void tg_leave_shared_cpu(int me, int workers) {
  int mine = tg_cpu_now();
  atomic_store_explicit(&tg_pool.cpu[me], mine, memory_order_relaxed);
  int shared = mine == atomic_load_explicit(&tg_pool.cpu[0], memory_order_relaxed);
  for (int i = 1; i < me && !shared; i++) shared = mine == atomic_load_explicit(&tg_pool.cpu[i], memory_order_relaxed);
  if (!shared || mine < 0) return;
  static double next_try[TG_MAX_WORKERS + 1]; /* (each worker its own: a CPU it cannot leave is not tried at once) */
  double t = tg_now_us();
  if (t < next_try[me]) return;
  next_try[me] = t + 1000;
  cpu_set_t allowed, free_, others;
  if (pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed) != 0) return;
  free_ = others = allowed;
  for (int i = 0; i <= workers && i <= TG_MAX_WORKERS; i++) {
    int c = atomic_load_explicit(&tg_pool.cpu[i], memory_order_relaxed);
    if (c >= 0 && c < CPU_SETSIZE && i != me) CPU_CLR(c, &free_);
  }
  CPU_CLR(mine, &free_);
  CPU_CLR(mine, &others);
  cpu_set_t *to = CPU_COUNT(&free_) > 0 ? &free_ : &others;
  if (CPU_COUNT(to) == 0 || pthread_setaffinity_np(pthread_self(), sizeof *to, to) != 0) return;
  pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed); /* (a running thread stays where it now is) */
  atomic_store_explicit(&tg_pool.cpu[me], tg_cpu_now(), memory_order_relaxed);
  atomic_fetch_add(&tg_pool.moves, 1);
}
#else
static int tg_cpu_now(void) { return TG_NO_CPU; }
static void tg_leave_shared_cpu(int me, int workers) { (void)me, (void)workers; }
#endif

/* claim and run chunks of generation `gen` until none is left */
static void tg_run_chunks(uint64_t gen) {
  for (;;) {
    uint64_t w = atomic_load_explicit(&tg_pool.job, memory_order_acquire);
    uint64_t next = w & TG_CHUNK_MASK, n = (w >> TG_CHUNK_BITS) & TG_CHUNK_MASK;
    if ((w >> (2 * TG_CHUNK_BITS)) != gen || next >= n) return;
    if (!atomic_compare_exchange_weak_explicit(&tg_pool.job, &w, w + 1, memory_order_acq_rel, memory_order_relaxed))
      continue;
    tg_pool.fn(tg_pool.args, (int)next);  /* the job is live until this chunk is counted done */
    atomic_fetch_add_explicit(&tg_pool.done, 1, memory_order_release);
  }
}

static int tg_has_work(uint64_t seen) {
  uint64_t w = atomic_load(&tg_pool.job);  /* (sequentially consistent: pairs with the caller's check of sleepers) */
  return (w >> (2 * TG_CHUNK_BITS)) != seen && (w & TG_CHUNK_MASK) < ((w >> TG_CHUNK_BITS) & TG_CHUNK_MASK);
}

/* spin until this time (microseconds): `until`, or later when a realize woke the pool since (tg_pool_wake) */
static double tg_spin_until(double until) {
  double woken = (double)atomic_load_explicit(&tg_pool.wake_us, memory_order_relaxed) + TG_WAKE_SPIN_US;
  return woken > until ? woken : until;
}

static void *tg_worker(void *index) {
  int me = (int)(intptr_t)index;
  uint64_t seen = atomic_load(&tg_pool.job) >> (2 * TG_CHUNK_BITS);
  tg_leave_shared_cpu(me, tg_pool.workers);
  for (;;) {
    double until = tg_now_us() + TG_SPIN_US;
    int spins = 0;
    while (!tg_has_work(seen)) {
      tg_pause();
      if (++spins % 256 != 0) continue;
      tg_leave_shared_cpu(me, tg_pool.workers);
      double now = tg_now_us(); /* (read before the last wake's time: a worker descheduled between the two reads
                                   must not take a wake it has not seen for a wake 1 ms old) */
      if (now > (until = tg_spin_until(until))) {
        atomic_fetch_add(&tg_pool.naps, 1);
        pthread_mutex_lock(&tg_pool.lock);
        unsigned wakes = atomic_load(&tg_pool.wakes);
        atomic_store_explicit(&tg_pool.cpu[me], TG_NO_CPU, memory_order_relaxed);
        atomic_fetch_add(&tg_pool.sleepers, 1);
        while (!tg_has_work(seen) && atomic_load(&tg_pool.wakes) == wakes)
          pthread_cond_wait(&tg_pool.wake, &tg_pool.lock);
        atomic_fetch_sub(&tg_pool.sleepers, 1);
        pthread_mutex_unlock(&tg_pool.lock);
        tg_leave_shared_cpu(me, tg_pool.workers);
        /* woken by tg_pool_wake (or by a job, which it runs at once): spin for a launch that is on its way */
        until = tg_now_us() + TG_WAKE_SPIN_US;
      }
    }
    seen = atomic_load_explicit(&tg_pool.job, memory_order_acquire) >> (2 * TG_CHUNK_BITS);
    tg_run_chunks(seen);
  }
  return 0;
}

static void tg_after_fork(void) {  /* the child has only the thread that forked: no workers, nothing locked */
  tg_pool.workers = 0;
  pthread_mutex_init(&tg_pool.lock, 0);
  pthread_mutex_init(&tg_pool.busy, 0);
  pthread_cond_init(&tg_pool.wake, 0);
  atomic_store(&tg_pool.sleepers, 0);
  for (int i = 0; i <= TG_MAX_WORKERS; i++) atomic_store(&tg_pool.cpu[i], TG_NO_CPU);
}

static void tg_start_workers(int want) {
  if (!tg_pool.ready) {
    pthread_atfork(0, 0, tg_after_fork);
    tg_pool.ready = 1;
  }
  if (want > TG_MAX_WORKERS) want = TG_MAX_WORKERS;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  while (tg_pool.workers < want) {
    pthread_t t;
    atomic_store(&tg_pool.cpu[tg_pool.workers + 1], TG_NO_CPU);
    if (pthread_create(&t, &attr, tg_worker, (void *)(intptr_t)(tg_pool.workers + 1)) != 0) break;
    tg_pool.workers++;
  }
  pthread_attr_destroy(&attr);
}

/* kernels are coming (a realize started): wake sleeping workers now, so they spin by the first launch, and keep
   spinning ones spinning (tg_spin_until) */
void tg_pool_wake(void) {
  atomic_store_explicit(&tg_pool.wake_us, (uint64_t)tg_now_us(), memory_order_relaxed);
  atomic_store_explicit(&tg_pool.cpu[0], tg_cpu_now(), memory_order_relaxed);
  if (atomic_load(&tg_pool.sleepers) == 0) return;
  pthread_mutex_lock(&tg_pool.lock);
  atomic_fetch_add(&tg_pool.wakes, 1);
  pthread_cond_broadcast(&tg_pool.wake);
  pthread_mutex_unlock(&tg_pool.lock);
}

int tg_pool_sleeping(void) { return atomic_load(&tg_pool.sleepers); }
int tg_pool_moves(void) { return atomic_load(&tg_pool.moves); }
int tg_pool_naps(void) { return atomic_load(&tg_pool.naps); }

void tg_pool_run(tg_chunk_fn fn, void *args, int n, int threads) {
  if (n <= 1 || threads <= 1 || (uint64_t)n > TG_CHUNK_MASK || pthread_mutex_trylock(&tg_pool.busy) != 0) {
    for (int i = 0; i < n; i++) fn(args, i);
    return;
  }
  atomic_store_explicit(&tg_pool.cpu[0], tg_cpu_now(), memory_order_relaxed);
  tg_start_workers((threads < n ? threads : n) - 1);
  tg_pool.fn = fn;
  tg_pool.args = args;
  atomic_store_explicit(&tg_pool.done, 0, memory_order_relaxed);
  uint64_t gen = ((atomic_load(&tg_pool.job) >> (2 * TG_CHUNK_BITS)) + 1) & 0xffffff;
  atomic_store(&tg_pool.job, (gen << (2 * TG_CHUNK_BITS)) | ((uint64_t)n << TG_CHUNK_BITS));
  if (atomic_load(&tg_pool.sleepers) > 0) {
    pthread_mutex_lock(&tg_pool.lock);
    pthread_cond_broadcast(&tg_pool.wake);
    pthread_mutex_unlock(&tg_pool.lock);
  }
  tg_run_chunks(gen);
  /* the last chunks' workers may be off their cores (a busy machine): after a short spin, yield ours to them */
  for (int spins = 0; atomic_load_explicit(&tg_pool.done, memory_order_acquire) < n; spins++) {
    if (spins < 4096) tg_pause();
    else sched_yield();
  }
  pthread_mutex_unlock(&tg_pool.busy);
}
""".replace("TG_WAKE_SPIN_US", str(WAKE_SPIN_US)).replace("TG_SPIN_US", str(SPIN_US))
