/*
 * libtiming.so: a QEMU 7.2 TCG plugin that records what a Cortex-A53 timing model needs
 * (edge_sdk/timing/): for every translation block its guest address, instruction bytes and, per
 * vCPU (per guest thread in user mode), how often it ran, how often its last instruction branched
 * away (next block is not the fall-through), its most frequent predecessor, and the L1/L2 misses
 * of its loads, stores and instruction fetches in a simulated Cortex-A53 cache hierarchy:
 * a private L1 D and L1 I per core (vCPU i -> core i % cores) and one L2 shared by all cores.
 *
 * Cost: one callback per executed block (not per instruction) and one per memory access (as
 * contrib/plugins/cache.c does); L1 lookups take no lock (each core's L1 belongs to one thread),
 * the shared L2 takes one mutex per L1 miss.
 *
 * Parallel regions: mark=FILE@HEX (repeatable) names a code address by the mapped file whose path
 * contains FILE and the ELF address HEX in it (e.g. libgomp@<GOMP_parallel>); executing it (any
 * vCPU) starts a new epoch. Per epoch and vCPU the plugin sums instructions and load misses of the
 * blocks outside the files named by skip=FILE (e.g. the OpenMP runtime, whose waiting is not work) and
 * outside the code ranges named by skip=FILE@LO-HI (ELF addresses, hex, of the file whose path contains FILE:
 * e.g. libc's sched_yield, which a thread pool's spin-wait calls). Files are found in /proc/self/maps at start
 * and after every file mmap the guest makes.
 *
 * Cache model (the one `--memory` uses, contrib/plugins/cache.c, in qemu 7.2): true LRU, 64 B lines,
 * each access looks up the line of its first byte (translate-a64.c splits a 128-bit access into two
 * 64-bit ones), stores allocate like loads. Geometry: dcachesize, dassoc, icachesize, iassoc,
 * l2cachesize, l2assoc, blksize, cores (defaults: the Raspberry Pi 3's BCM2837).
 * Prefetching, which cache.c lacks and a Cortex-A53 has:
 * - software: PRFM PLD/PST [Xn, #imm] (a no-op in qemu) prefetches, whenever a load or store of the
 *   same block with the same base register Xn accesses address a, the line of a + imm (swpf=0: off);
 * - hardware (A53 TRM, "Data prefetching"): a sequence of pf_trigger L1 load misses at a fixed stride
 *   of at most pf_window lines starts linefills pf_depth lines ahead; a demand hit on a prefetched
 *   line keeps its stream pf_depth ahead (pf_streams streams per core; pf_depth=0: off).
 * Prefetched lines fill the L1 and the L2 without a stall; their L2 misses are DRAM traffic.
 * Coherence: a store removes its line from the other cores' L1 D (their next access misses to the L2,
 * as a snoop of the writer's copy would cost), so a producer's output is not a stale hit elsewhere.
 * Write streaming (A53 TRM, "read allocate mode"; wstream=1): after ws_l1 store misses to consecutive
 * lines a core's stores that miss stop allocating in its L1 (they go to the L2), after ws_l2 also in
 * the L2 (they go to DRAM), until a store misses elsewhere; such a line costs one DRAM write, no fill.
 *
 * Lockstep (lockstep=Q, 0: off; only matters with more than one guest thread): a vCPU that has executed more
 * than Q instructions beyond the slowest *runnable* vCPU waits at its next block until that one catches up (at
 * most lockstep_us microseconds of host time per wait, so a vCPU that qemu itself holds, e.g. in an exclusive
 * section, cannot deadlock the guest). A vCPU inside a syscall that waits (a futex wait, a sleep, a read) is
 * not runnable; when it returns it resumes at the slowest runnable vCPU's count (it slept while they ran). So the shared L2 sees the
 * guest threads' accesses in near-lockstep order whatever the host's load: without it, a 4-thread count's L2
 * misses, and its modelled time, follow the host's scheduling of qemu's threads.
 *
 * Output (out=PATH, written at exit, plain text):
 *   T <key> <value>                    header (version, parameters)
 *   B <id> <vaddr hex> <n insns> <instruction bytes hex>
 *   C <vcpu> <id> <exec> <taken> <pred id+1> <ld l1 miss> <ld l2 miss> <st l1 miss> <st l2 miss>
 *     <ifetch l1 miss> <ifetch l2 miss> <prefetch fills> <prefetch l2 miss> <streamed store lines to DRAM>
 *     (blocks with exec > 0)
 *   E <vcpu> <epoch> <insns> <ld l1 miss> <ld l2 miss> <DRAM lines>  (with mark= only, nonzero rows)
 *   M <line of /proc/self/maps>   every file mapping seen after a file mmap or at exit (a library the
 *     guest dlclose'd stays listed); user mode with guest_base 0, so these are guest addresses
 */
#include <glib.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define MAX_VCPUS 64
#define MAX_BLOCKS (1u << 20)
#define MAX_EPOCHS (1u << 16)
#define MAX_MARKS 16
#define MAX_SKIPS 16

enum { C_EXEC, C_TAKEN, C_PRED, C_VOTE, C_LD1, C_LD2, C_ST1, C_ST2, C_IF1, C_IF2, C_PF1, C_PF2, C_STW, NC };
#define HIST 8
#define MAX_STREAMS 8
enum { E_INSNS, E_LD1, E_LD2, E_DRAM, NE };

typedef struct {
    uint64_t *tags;  /* sets x assoc line numbers + 1 (0: invalid), most recent first */
    uint8_t *flags;  /* per tag: stream + 1 that prefetched the line, 0: demand or software */
    uint32_t sets, assoc;
} Cache;

typedef struct {
    int64_t last, stride, next;
    int conf;
    uint64_t age;
} Stream;

typedef struct {
    Cache l1d, l1i;
    int64_t hist[HIST];
    int hpos;
    Stream st[MAX_STREAMS];
    uint64_t tick, dram;
    int64_t sw_last;
    int64_t ws_last, ws_run;  /* write streaming: last store-miss line, consecutive lines so far */
} Core;

typedef struct {
    uint32_t id;
    int32_t pf_off;
    bool pf;
} Insn;

typedef struct {
    uint64_t vaddr;
    uint32_t n_insns, size, id;
    bool mark, skip;
    uint8_t *bytes;
    Insn *insns;
} Block;

typedef struct {
    uint64_t (*c)[NC];
    uint64_t (*e)[NE];
    Core *core;
    int64_t last;
} Vcpu;

static Block *blocks[MAX_BLOCKS];
static uint32_t n_blocks, dropped;
static GHashTable *block_ids;
static GMutex trans_lock, l2_lock, vcpu_lock;
static Vcpu *vcpus[MAX_VCPUS];
static Core *all_cores[MAX_VCPUS];  /* each core once, for coherence */
static int n_cores;
static Cache l2;
static uint32_t line_shift = 6, cores = 4;
static uint64_t dsize = 32768, dassoc = 4, isize = 32768, iassoc = 2, l2size = 524288, l2assoc = 16;
static uint64_t pf_streams = 2, pf_depth = 4, pf_window = 4, pf_trigger = 3, swpf = 1;
static uint64_t wstream = 1, ws_l1 = 3, ws_l2 = 128;
#define MAX_RANGES 64
static char *mark_file[MAX_MARKS], *skip_file[MAX_SKIPS];
static uint64_t mark_elf[MAX_MARKS], marks[MAX_MARKS], skip_lo[MAX_RANGES], skip_hi[MAX_RANGES];
static uint64_t skip_elf_lo[MAX_SKIPS], skip_elf_hi[MAX_SKIPS];  /* skip=FILE@LO-HI; hi 0: the whole file */
static int n_marks, n_skip_files, n_skips;
static GMutex maps_lock;
static GHashTable *seen_maps;   /* file-backed /proc/self/maps lines seen so far */
static GPtrArray *maps_order;
static bool pending_maps[MAX_VCPUS];
static uint64_t epoch;
static uint64_t lockstep, lockstep_us = 100000;
static uint64_t ls_insns[MAX_VCPUS];  /* per vCPU: instructions executed (all blocks) */
static int ls_state[MAX_VCPUS];       /* 0: no thread / exited, 1: runnable, 2: inside a syscall */
static uint64_t ls_waits, ls_timeouts;
static unsigned int ls_vcpus;         /* 1 + the highest vCPU index that has joined */
static char *out_path;

static void *zalloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    g_assert(p != MAP_FAILED);
    return p;
}

static void cache_init(Cache *c, uint64_t size, uint64_t assoc)
{
    c->assoc = assoc;
    c->sets = size / ((1u << line_shift) * assoc);
    c->tags = zalloc(sizeof(uint64_t) * c->sets * c->assoc);
    c->flags = zalloc(c->sets * c->assoc);
}

/*
 * True LRU by move-to-front, on line numbers. A demand reference (prefetch < 0) moves or inserts the
 * line at the front and returns 1 on a hit (*flag: who prefetched it, then cleared); a prefetch
 * (prefetch >= 0: its flag) inserts an absent line at the front and leaves a present one alone.
 */
static int cache_ref(Cache *c, uint64_t line, int prefetch, int *flag)
{
    uint64_t key = line + 1;
    size_t base = (key % c->sets) * c->assoc;
    uint64_t *set = c->tags + base;
    uint8_t *fl = c->flags + base;
    uint32_t i;
    for (i = 0; i < c->assoc && set[i] != key; i++) {
    }
    bool hit = i < c->assoc;
    if (hit && prefetch >= 0) {
        return 1;
    }
    uint8_t f = hit ? fl[i] : (uint8_t)(prefetch > 0 ? prefetch : 0);
    if (flag) {
        *flag = hit ? f : 0;
    }
    if (!hit) {
        i = c->assoc - 1;
    }
    memmove(set + 1, set, i * sizeof(uint64_t));
    memmove(fl + 1, fl, i);
    set[0] = key;
    fl[0] = hit ? 0 : f;
    return hit;
}

static bool cache_access(Cache *c, uint64_t addr)
{
    return cache_ref(c, addr >> line_shift, -1, NULL);
}

static bool l2_ref(uint64_t line, int prefetch)
{
    g_mutex_lock(&l2_lock);
    bool hit = cache_ref(&l2, line, prefetch, NULL);
    g_mutex_unlock(&l2_lock);
    return hit;
}

static bool l2_access(uint64_t addr)
{
    return l2_ref(addr >> line_shift, -1);
}

/* Bring a line into the core's L1 D (and the L2) ahead of use; counts the fills in c. */
static void prefetch_line(Core *k, uint64_t *c, int64_t line, int flag)
{
    if (line < 0 || cache_ref(&k->l1d, (uint64_t)line, flag, NULL)) {
        return;
    }
    c[C_PF1]++;
    if (!l2_ref((uint64_t)line, 0)) {
        c[C_PF2]++;
        k->dram++;
    }
}

/* Keep a stream pf_depth lines ahead of `line`: at most pf_depth new fills per call. */
static void stream_run(Core *k, uint64_t *c, Stream *s, int64_t line, int id)
{
    if ((s->next - line) / s->stride < 1) {
        s->next = line + s->stride;
    }
    for (uint64_t n = 0; n < pf_depth && (s->next - line) / s->stride <= (int64_t)pf_depth; n++) {
        prefetch_line(k, c, s->next, id + 1);
        s->next += s->stride;
    }
}

/* The A53's L1 D prefetcher, trained on demand load misses (see the header). */
static void hw_miss(Core *k, uint64_t *c, int64_t line)
{
    k->tick++;
    for (int i = 0; i < (int)pf_streams; i++) {
        Stream *s = &k->st[i];
        if (s->conf && line == s->last + s->stride) {
            s->conf++;
            s->last = line;
            s->age = k->tick;
            if (s->conf >= (int)pf_trigger) {
                stream_run(k, c, s, line, i);
            }
            return;
        }
    }
    for (int j = 1; j <= HIST; j++) {
        int64_t d = line - k->hist[(k->hpos - j + HIST) % HIST];
        if (d != 0 && d <= (int64_t)pf_window && d >= -(int64_t)pf_window && k->hist[(k->hpos - j + HIST) % HIST]) {
            int lru = 0;
            for (int i = 1; i < (int)pf_streams; i++) {
                lru = k->st[i].age < k->st[lru].age ? i : lru;
            }
            k->st[lru] = (Stream){.last = line, .stride = d, .next = line + d, .conf = 2, .age = k->tick};
            break;
        }
    }
    k->hist[k->hpos] = line;
    k->hpos = (k->hpos + 1) % HIST;
}

/* A demand hit on a line stream `flag - 1` prefetched keeps that stream pf_depth lines ahead. */
static void hw_hit(Core *k, uint64_t *c, int64_t line, int flag)
{
    if (flag - 1 >= (int)pf_streams) {
        return;
    }
    Stream *s = &k->st[flag - 1];
    int64_t ahead = s->stride ? (s->next - line) / s->stride : 0;
    if (s->conf >= (int)pf_trigger && ahead >= 1 && ahead <= (int64_t)pf_depth + 1) {  /* still this stream */
        s->last = line;
        s->age = ++k->tick;
        stream_run(k, c, s, line, flag - 1);
    }
}

static Vcpu *vcpu_get(unsigned int index)
{
    g_assert(index < MAX_VCPUS);
    if (vcpus[index] == NULL) {
        /* A core (L1s, prefetcher) is shared by the vCPUs that map to it (vCPU i -> core i % cores). */
        Vcpu *same = index >= cores ? vcpu_get(index % cores) : NULL;
        g_mutex_lock(&vcpu_lock);
        if (vcpus[index] == NULL) {
            Vcpu *v = g_new0(Vcpu, 1);
            v->c = zalloc(sizeof(uint64_t) * NC * MAX_BLOCKS);
            v->e = zalloc(sizeof(uint64_t) * NE * MAX_EPOCHS);
            v->last = -1;
            if (same) {
                v->core = same->core;
            } else {
                v->core = g_new0(Core, 1);
                cache_init(&v->core->l1d, dsize, dassoc);
                cache_init(&v->core->l1i, isize, iassoc);
                v->core->sw_last = -1;
                v->core->ws_last = INT64_MIN / 2;
                all_cores[n_cores] = v->core;
                __atomic_store_n(&n_cores, n_cores + 1, __ATOMIC_RELEASE);
            }
            __atomic_store_n(&vcpus[index], v, __ATOMIC_RELEASE);
        }
        g_mutex_unlock(&vcpu_lock);
    }
    return vcpus[index];
}

/* Find the mark addresses and skip ranges in this process's mappings (guest_base 0 in user mode). */
static void resolve_files(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096], path[4096];
    uint64_t lo, hi, off;
    int ranges = 0;
    uint64_t base[MAX_MARKS] = {0}, skip_base[MAX_SKIPS] = {0};
    if (maps == NULL) {
        return;
    }
    g_mutex_lock(&maps_lock);
    while (fgets(line, sizeof(line), maps)) {
        path[0] = 0;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64 " %*s %*s %4095s", &lo, &hi, &off, path) < 3) {
            continue;
        }
        if (path[0] == '/' && !g_hash_table_contains(seen_maps, line)) {
            char *keep = g_strdup(line);
            g_hash_table_add(seen_maps, keep);
            g_ptr_array_add(maps_order, keep);
        }
        for (int i = 0; i < n_marks; i++) {
            if (path[0] && strstr(path, mark_file[i]) && off == 0 && (base[i] == 0 || lo < base[i])) {
                base[i] = lo;
            }
        }
        for (int i = 0; i < n_skip_files; i++) {
            if (skip_elf_hi[i] && path[0] && strstr(path, skip_file[i]) && off == 0
                && (skip_base[i] == 0 || lo < skip_base[i])) {
                skip_base[i] = lo;
            }
        }
        for (int i = 0; i < n_skip_files && ranges < MAX_RANGES; i++) {
            if (!skip_elf_hi[i] && path[0] && strstr(path, skip_file[i])) {
                skip_lo[ranges] = lo;
                skip_hi[ranges++] = hi;
                break;
            }
        }
    }
    fclose(maps);
    for (int i = 0; i < n_skip_files && ranges < MAX_RANGES; i++) {
        if (skip_elf_hi[i] && skip_base[i]) {
            skip_lo[ranges] = skip_base[i] + skip_elf_lo[i];
            skip_hi[ranges++] = skip_base[i] + skip_elf_hi[i];
        }
    }
    for (int i = 0; i < n_marks; i++) {
        marks[i] = base[i] ? base[i] + mark_elf[i] : 0;
    }
    n_skips = ranges;
    g_mutex_unlock(&maps_lock);
}

/* The slowest runnable vCPU's instruction count other than `self` (UINT64_MAX: none). */
static uint64_t ls_slowest(unsigned int self)
{
    uint64_t lo = UINT64_MAX;
    unsigned int n = __atomic_load_n(&ls_vcpus, __ATOMIC_ACQUIRE);  /* every block: scan only the vCPUs seen */
    for (unsigned int i = 0; i < n; i++) {
        if (i != self && __atomic_load_n(&ls_state[i], __ATOMIC_ACQUIRE) == 1) {
            uint64_t n = __atomic_load_n(&ls_insns[i], __ATOMIC_RELAXED);
            lo = n < lo ? n : lo;
        }
    }
    return lo;
}

/* A vCPU (re)joins the runnable set at the slowest runnable one's count (or keeps its own if ahead of it). */
static void ls_join(unsigned int index)
{
    unsigned int seen = __atomic_load_n(&ls_vcpus, __ATOMIC_RELAXED);
    while (seen <= index && !__atomic_compare_exchange_n(&ls_vcpus, &seen, index + 1, false, __ATOMIC_RELEASE,
                                                         __ATOMIC_RELAXED)) {
    }
    uint64_t lo = ls_slowest(index);
    if (lo != UINT64_MAX && lo > ls_insns[index]) {
        __atomic_store_n(&ls_insns[index], lo, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&ls_state[index], 1, __ATOMIC_RELEASE);
}

static void ls_step(unsigned int index, uint32_t n_insns)
{
    uint64_t mine = __atomic_add_fetch(&ls_insns[index], n_insns, __ATOMIC_RELAXED);
    uint64_t lo = ls_slowest(index);
    if (lo == UINT64_MAX || mine <= lo + lockstep) {
        return;
    }
    __atomic_fetch_add(&ls_waits, 1, __ATOMIC_RELAXED);
    gint64 until = g_get_monotonic_time() + (gint64)lockstep_us;
    while (lo != UINT64_MAX && mine > lo + lockstep) {
        if (g_get_monotonic_time() > until) {
            __atomic_fetch_add(&ls_timeouts, 1, __ATOMIC_RELAXED);
            return;
        }
        g_thread_yield();
        lo = ls_slowest(index);
    }
}

/* Syscalls that may wait for another thread or for time (aarch64 numbers): while inside one a vCPU is not
 * runnable. Every other syscall is as short on a Pi as an instruction run, so its thread stays runnable and
 * the others keep within the window of it. futex: the waiting operations (WAIT, LOCK_PI, WAIT_BITSET,
 * WAIT_REQUEUE_PI, LOCK_PI2). */
static bool ls_blocking(int64_t num, uint64_t a2)
{
    switch (num) {
    case 98: {
        uint64_t op = a2 & 127;
        return op == 0 || op == 6 || op == 9 || op == 11 || op == 13;
    }
    case 22: case 63: case 65: case 72: case 73: case 101: case 115: case 207: case 242: case 260: case 95:
        return true;  /* epoll_pwait read readv pselect6 ppoll nanosleep clock_nanosleep recvfrom accept4 wait4 waitid */
    default:
        return false;
    }
}

static void syscall_in(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num, uint64_t a1, uint64_t a2,
                       uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8)
{
    if (vcpu_index < MAX_VCPUS) {
        pending_maps[vcpu_index] = num == 222 && (int64_t)a5 >= 0;  /* aarch64 mmap of a file (fd = a5) */
        if (lockstep && ls_blocking(num, a2)) {
            __atomic_store_n(&ls_state[vcpu_index], 2, __ATOMIC_RELEASE);
        }
    }
}

static void syscall_ret(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num, int64_t ret)
{
    if (lockstep && vcpu_index < MAX_VCPUS && __atomic_load_n(&ls_state[vcpu_index], __ATOMIC_ACQUIRE) == 2) {
        ls_join(vcpu_index);
    }
    if (vcpu_index < MAX_VCPUS && pending_maps[vcpu_index] && ret >= 0) {
        pending_maps[vcpu_index] = false;
        resolve_files();
    }
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int index)
{
    vcpu_get(index);
    if (lockstep) {
        ls_join(index);
    }
}

static void vcpu_exit(qemu_plugin_id_t id, unsigned int index)
{
    if (index < MAX_VCPUS) {
        __atomic_store_n(&ls_state[index], 0, __ATOMIC_RELEASE);
    }
}

static uint64_t cur_epoch(void)
{
    uint64_t e = __atomic_load_n(&epoch, __ATOMIC_RELAXED);
    return e < MAX_EPOCHS ? e : MAX_EPOCHS - 1;
}

static void count_predecessor(Vcpu *v, uint64_t *c, const Block *b)
{
    if (v->last < 0) {
        return;
    }
    const Block *p = blocks[v->last];
    if (p->vaddr + p->size != b->vaddr) {
        v->c[v->last][C_TAKEN]++;
    }
    /* Boyer-Moore majority vote: C_PRED ends as the most frequent predecessor (id + 1). */
    uint64_t want = (uint64_t)v->last + 1;
    if (c[C_PRED] == want) {
        c[C_VOTE]++;
    } else if (c[C_VOTE] == 0) {
        c[C_PRED] = want;
        c[C_VOTE] = 1;
    } else {
        c[C_VOTE]--;
    }
}

static void tb_exec(unsigned int vcpu_index, void *udata)
{
    uint32_t id = (uint32_t)(uintptr_t)udata;
    const Block *b = blocks[id];
    Vcpu *v = vcpu_get(vcpu_index);
    if (lockstep) {
        ls_step(vcpu_index, b->n_insns);
    }
    uint64_t *c = v->c[id];
    c[C_EXEC]++;
    count_predecessor(v, c, b);
    v->last = id;
    if (b->mark) {
        __atomic_fetch_add(&epoch, 1, __ATOMIC_RELAXED);
    }
    uint64_t ep = cur_epoch();
    if (!b->skip) {
        v->e[ep][E_INSNS] += b->n_insns;
    }
    uint64_t first = b->vaddr >> line_shift, last = (b->vaddr + b->size - 1) >> line_shift;
    for (uint64_t line = first; line <= last; line++) {
        if (!cache_access(&v->core->l1i, line << line_shift)) {
            c[C_IF1]++;
            if (!l2_access(line << line_shift)) {
                c[C_IF2]++;
            }
        }
    }
}

static bool cache_has(const Cache *c, uint64_t line)
{
    const uint64_t *set = c->tags + ((line + 1) % c->sets) * c->assoc;
    for (uint32_t i = 0; i < c->assoc; i++) {
        if (set[i] == line + 1) {
            return true;
        }
    }
    return false;
}

/* A store by core k invalidates the line in every other core's L1 D (unlocked: another thread may race
 * with its own set, which costs at worst one misplaced invalidation, never memory safety). */
static void invalidate_others(const Core *k, uint64_t line)
{
    int n = __atomic_load_n(&n_cores, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        Cache *o = &all_cores[i]->l1d;
        if (all_cores[i] == k) {
            continue;
        }
        uint64_t *set = o->tags + ((line + 1) % o->sets) * o->assoc;
        for (uint32_t j = 0; j < o->assoc; j++) {
            if (set[j] == line + 1) {
                set[j] = 0;
            }
        }
    }
}

/* Write streaming (see the header): true when the store was handled here (the line was not allocated). */
static bool store_streams(Core *k, uint64_t *c, int64_t line, uint64_t *ep)
{
    if (cache_has(&k->l1d, (uint64_t)line)) {
        return false;  /* a hit: the normal path */
    }
    if (line != k->ws_last) {
        k->ws_run = line == k->ws_last + 1 ? k->ws_run + 1 : 0;
        k->ws_last = line;
    } else if (k->ws_run >= (int64_t)ws_l1) {
        return true;  /* another store into the line being streamed out: counted already */
    }
    if (k->ws_run < (int64_t)ws_l1) {
        return false;  /* still allocating */
    }
    c[C_ST1]++;
    bool in_l2;
    g_mutex_lock(&l2_lock);
    in_l2 = cache_has(&l2, (uint64_t)line);
    if (k->ws_run < (int64_t)ws_l2 && !in_l2) {
        cache_ref(&l2, (uint64_t)line, 0, NULL);  /* the full line lands in the L2 without a fill */
    }
    g_mutex_unlock(&l2_lock);
    if (!in_l2) {
        c[C_STW]++;  /* one DRAM write (now, or when the L2 evicts it) */
        if (ep) {
            ep[E_DRAM]++;
        }
    }
    return true;
}

static void mem_access(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    const Insn *in = udata;
    uint32_t id = in->id;
    Vcpu *v = vcpu_get(vcpu_index);
    Core *k = v->core;
    uint64_t *c = v->c[id];
    bool store = qemu_plugin_mem_is_store(info);
    int64_t line = (int64_t)(vaddr >> line_shift);
    int flag = 0;
    if (in->pf && swpf) {
        int64_t want = (int64_t)((vaddr + (int64_t)in->pf_off) >> line_shift);
        if (want != k->sw_last) {
            prefetch_line(k, c, want, 0);
            k->sw_last = want;
        }
    }
    if (store && n_cores > 1) {
        invalidate_others(k, (uint64_t)line);
    }
    if (store && wstream && store_streams(k, c, line, blocks[id]->skip ? NULL : v->e[cur_epoch()])) {
        return;
    }
    if (cache_ref(&k->l1d, (uint64_t)line, -1, &flag)) {
        if (flag && !store && pf_depth) {
            hw_hit(k, c, line, flag);
        }
        return;
    }
    if (!store && pf_depth) {
        hw_miss(k, c, line);
    }
    bool hit2 = l2_access(vaddr);
    c[store ? C_ST1 : C_LD1]++;
    if (!hit2) {
        c[store ? C_ST2 : C_LD2]++;
    }
    k->dram += hit2 ? 0 : store ? 2 : 1;  /* a store miss: a fill now and a write-back later */
    if (!blocks[id]->skip) {
        uint64_t ep = cur_epoch();
        v->e[ep][E_LD1] += !store;
        v->e[ep][E_LD2] += !store && !hit2;
        v->e[ep][E_DRAM] += k->dram;
    }
    k->dram = 0;
}

static guint block_hash(gconstpointer key)
{
    const Block *b = key;
    guint h = (guint)(b->vaddr ^ (b->vaddr >> 32)) * 2654435761u;
    for (uint32_t i = 0; i < b->size; i++) {
        h = h * 31u + b->bytes[i];
    }
    return h;
}

static gboolean block_equal(gconstpointer a, gconstpointer b)
{
    const Block *x = a, *y = b;
    return x->vaddr == y->vaddr && x->size == y->size && memcmp(x->bytes, y->bytes, x->size) == 0;
}

/* PRFM PLD/PST with an immediate offset: base register and byte offset (false if not one). */
static bool prfm_of(uint32_t w, int *rn, int32_t *off)
{
    unsigned type = (w >> 3) & 3;  /* Rt<4:3>: 00 PLD, 01 PLI (not data), 10 PST */
    bool pld_pst = type == 0 || type == 2;
    if ((w & 0xffc00000u) == 0xf9800000u && pld_pst) {        /* PRFM (immediate), imm12 x 8 */
        *rn = (w >> 5) & 31;
        *off = (int32_t)(((w >> 10) & 0xfff) * 8);
        return true;
    }
    if ((w & 0xffe00c00u) == 0xf8800000u && pld_pst) {        /* PRFUM, signed imm9 */
        *rn = (w >> 5) & 31;
        *off = ((int32_t)(w << 11)) >> 23;
        return true;
    }
    return false;
}

/* Per instruction: its block, and the prefetch offset of a PRFM on the same base register. */
static Insn *insns_of(const Block *b)
{
    Insn *in = g_new0(Insn, b->n_insns ? b->n_insns : 1);
    int32_t pf_off[32];
    bool has[32] = {false};
    for (uint32_t i = 0; i + 4 <= b->size && b->size == b->n_insns * 4; i += 4) {
        uint32_t w;
        int rn;
        int32_t off;
        memcpy(&w, b->bytes + i, 4);
        if (prfm_of(w, &rn, &off)) {
            has[rn] = true;
            pf_off[rn] = off;
        }
    }
    for (uint32_t i = 0; i < b->n_insns; i++) {
        uint32_t w = 0;
        in[i].id = b->id;
        if (b->size == b->n_insns * 4) {
            memcpy(&w, b->bytes + 4 * i, 4);
        }
        int rn = (w >> 5) & 31;
        bool ldst = ((w >> 25) & 5) == 4;  /* A64 loads and stores: op0 = x1x0 */
        if (ldst && has[rn] && rn != 31) {
            in[i].pf = true;
            in[i].pf_off = pf_off[rn];
        }
    }
    return in;
}

static Block *block_of(struct qemu_plugin_tb *tb)
{
    Block key = {.vaddr = qemu_plugin_tb_vaddr(tb), .n_insns = qemu_plugin_tb_n_insns(tb)};
    uint8_t buf[4096];
    for (size_t i = 0; i < key.n_insns; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        size_t n = qemu_plugin_insn_size(insn);
        if (key.size + n > sizeof(buf)) {
            return NULL;
        }
        memcpy(buf + key.size, qemu_plugin_insn_data(insn), n);
        key.size += n;
    }
    key.bytes = buf;
    Block *b = g_hash_table_lookup(block_ids, &key);
    if (b != NULL || n_blocks >= MAX_BLOCKS) {
        return b;
    }
    b = g_new0(Block, 1);
    *b = key;
    b->bytes = g_memdup2(buf, key.size);
    b->id = n_blocks;
    b->insns = insns_of(b);
    g_mutex_lock(&maps_lock);
    for (int i = 0; i < n_marks; i++) {
        b->mark |= marks[i] != 0 && marks[i] == b->vaddr;
    }
    for (int i = 0; i < n_skips; i++) {
        b->skip |= b->vaddr >= skip_lo[i] && b->vaddr < skip_hi[i];
    }
    g_mutex_unlock(&maps_lock);
    __atomic_store_n(&blocks[n_blocks], b, __ATOMIC_RELEASE);
    n_blocks++;
    g_hash_table_insert(block_ids, b, b);
    return b;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    g_mutex_lock(&trans_lock);
    Block *b = block_of(tb);
    if (b == NULL) {
        dropped++;
    }
    g_mutex_unlock(&trans_lock);
    if (b == NULL) {
        return;
    }
    void *udata = (void *)(uintptr_t)b->id;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS, udata);
    for (size_t i = 0; i < b->n_insns; i++) {
        qemu_plugin_register_vcpu_mem_cb(qemu_plugin_tb_get_insn(tb, i), mem_access, QEMU_PLUGIN_CB_NO_REGS,
                                         QEMU_PLUGIN_MEM_RW, &b->insns[i]);
    }
}

static void write_blocks(FILE *f)
{
    for (uint32_t i = 0; i < n_blocks; i++) {
        const Block *b = blocks[i];
        fprintf(f, "B %u %" PRIx64 " %u ", b->id, b->vaddr, b->n_insns);
        for (uint32_t j = 0; j < b->size; j++) {
            fprintf(f, "%02x", b->bytes[j]);
        }
        fputc('\n', f);
    }
}

static void write_counts(FILE *f)
{
    uint64_t n_epochs = cur_epoch() + 1;
    for (unsigned int v = 0; v < MAX_VCPUS; v++) {
        if (vcpus[v] == NULL) {
            continue;
        }
        for (uint32_t i = 0; i < n_blocks; i++) {
            const uint64_t *c = vcpus[v]->c[i];
            if (c[C_EXEC]) {
                fprintf(f, "C %u %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                        " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", v, i,
                        c[C_EXEC], c[C_TAKEN], c[C_PRED], c[C_LD1], c[C_LD2], c[C_ST1], c[C_ST2], c[C_IF1],
                        c[C_IF2], c[C_PF1], c[C_PF2], c[C_STW]);
            }
        }
        for (uint64_t e = 0; n_marks && e < n_epochs; e++) {
            const uint64_t *x = vcpus[v]->e[e];
            if (x[E_INSNS] || x[E_LD1]) {
                fprintf(f, "E %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", v, e, x[E_INSNS],
                        x[E_LD1], x[E_LD2], x[E_DRAM]);
            }
        }
    }
}

static void at_exit(qemu_plugin_id_t id, void *p)
{
    g_mutex_lock(&trans_lock);
    FILE *f = fopen(out_path, "w");
    if (f == NULL) {
        fprintf(stderr, "libtiming: cannot write %s\n", out_path);
        g_mutex_unlock(&trans_lock);
        return;
    }
    fprintf(f, "T version 1\nT blocks %u\nT dropped %u\nT epochs %" PRIu64 "\n", n_blocks, dropped,
            n_marks ? cur_epoch() + 1 : 0);
    for (int i = 0; i < n_marks; i++) {
        fprintf(f, "T mark %s@%" PRIx64 "=%" PRIx64 "\n", mark_file[i], mark_elf[i], marks[i]);
    }
    for (int i = 0; i < n_skip_files; i++) {
        if (skip_elf_hi[i]) {
            fprintf(f, "T skip_range %s@%" PRIx64 "-%" PRIx64 "\n", skip_file[i], skip_elf_lo[i], skip_elf_hi[i]);
        }
    }
    fprintf(f, "T caches l1d=%" PRIu64 "/%" PRIu64 " l1i=%" PRIu64 "/%" PRIu64 " l2=%" PRIu64 "/%" PRIu64
            " line=%u cores=%u\n", dsize, dassoc, isize, iassoc, l2size, l2assoc, 1u << line_shift, cores);
    fprintf(f, "T prefetch streams=%" PRIu64 " depth=%" PRIu64 " window=%" PRIu64 " trigger=%" PRIu64 " sw=%" PRIu64
            "\n", pf_streams, pf_depth, pf_window, pf_trigger, swpf);
    fprintf(f, "T wstream %" PRIu64 " l1=%" PRIu64 " l2=%" PRIu64 "\n", wstream, ws_l1, ws_l2);
    fprintf(f, "T lockstep %" PRIu64 " us=%" PRIu64 " waits=%" PRIu64 " timeouts=%" PRIu64 "\n", lockstep, lockstep_us,
            ls_waits, ls_timeouts);
    write_blocks(f);
    write_counts(f);
    resolve_files();
    for (guint i = 0; i < maps_order->len; i++) {
        fprintf(f, "M %s", (const char *)g_ptr_array_index(maps_order, i));
    }
    fprintf(f, "T end 1\n");
    fclose(f);
    g_mutex_unlock(&trans_lock);
}

static bool parse_arg(const char *opt)
{
    g_auto(GStrv) kv = g_strsplit(opt, "=", 2);
    if (kv[0] == NULL || kv[1] == NULL) {
        return false;
    }
    const char *k = kv[0], *val = kv[1];
    uint64_t *sizes[] = {&dsize, &dassoc, &isize, &iassoc, &l2size, &l2assoc, &pf_streams, &pf_depth, &pf_window,
                         &pf_trigger, &swpf, &wstream, &ws_l1, &ws_l2, &lockstep, &lockstep_us};
    const char *names[] = {"dcachesize", "dassoc", "icachesize", "iassoc", "l2cachesize", "l2assoc", "pf_streams",
                           "pf_depth", "pf_window", "pf_trigger", "swpf", "wstream", "ws_l1", "ws_l2", "lockstep",
                           "lockstep_us"};
    for (int i = 0; i < 16; i++) {
        if (g_strcmp0(k, names[i]) == 0) {
            *sizes[i] = g_ascii_strtoull(val, NULL, 10);
            return i < 6 ? *sizes[i] > 0 : i == 6 ? *sizes[i] >= 1 && *sizes[i] <= MAX_STREAMS : true;
        }
    }
    if (g_strcmp0(k, "blksize") == 0) {
        uint64_t b = g_ascii_strtoull(val, NULL, 10);
        line_shift = 0;
        while ((1ull << line_shift) < b) {
            line_shift++;
        }
        return (1ull << line_shift) == b;
    } else if (g_strcmp0(k, "cores") == 0) {
        cores = g_ascii_strtoull(val, NULL, 10);
        return cores > 0 && cores <= MAX_VCPUS;
    } else if (g_strcmp0(k, "out") == 0) {
        out_path = g_strdup(val);
        return true;
    } else if (g_strcmp0(k, "mark") == 0 && n_marks < MAX_MARKS) {
        g_auto(GStrv) r = g_strsplit(val, "@", 2);
        if (r[0] == NULL || r[1] == NULL || !r[0][0]) {
            return false;
        }
        mark_file[n_marks] = g_strdup(r[0]);
        mark_elf[n_marks++] = g_ascii_strtoull(r[1], NULL, 16);
        return true;
    } else if (g_strcmp0(k, "skip") == 0 && n_skip_files < MAX_SKIPS && val[0]) {
        g_auto(GStrv) r = g_strsplit(val, "@", 2);
        if (r[1] != NULL) {  /* FILE@LO-HI */
            g_auto(GStrv) range = g_strsplit(r[1], "-", 2);
            if (!r[0][0] || range[1] == NULL) {
                return false;
            }
            skip_elf_lo[n_skip_files] = g_ascii_strtoull(range[0], NULL, 16);
            skip_elf_hi[n_skip_files] = g_ascii_strtoull(range[1], NULL, 16);
            if (skip_elf_hi[n_skip_files] <= skip_elf_lo[n_skip_files]) {
                return false;
            }
        }
        skip_file[n_skip_files++] = g_strdup(r[0]);
        return true;
    }
    return false;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (!parse_arg(argv[i])) {
            fprintf(stderr, "libtiming: option not understood: %s\n", argv[i]);
            return -1;
        }
    }
    if (out_path == NULL) {
        fprintf(stderr, "libtiming: out=PATH is required\n");
        return -1;
    }
    cache_init(&l2, l2size, l2assoc);
    block_ids = g_hash_table_new(block_hash, block_equal);
    seen_maps = g_hash_table_new(g_str_hash, g_str_equal);
    maps_order = g_ptr_array_new();
    resolve_files();
    qemu_plugin_register_vcpu_syscall_cb(id, syscall_in);
    qemu_plugin_register_vcpu_syscall_ret_cb(id, syscall_ret);
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
