// The `meshrun` binary's heap allocator: jemalloc (Debian's libjemalloc),
// linked when the build finds it and no sanitizer is on (CMake option
// MESHRUN_JEMALLOC). This file holds only jemalloc's compiled-in options;
// the environment variable MALLOC_CONF overrides any of them at run time.
//
// Why jemalloc, and why these options (bench/rdzv_scale, 10,000 agents on one
// server, docs/performance.md "Memory"): with glibc's malloc the server held
// 42 KiB per connected agent and kept 94-120 MiB after every agent had left,
// although it freed nearly all of it: each connection's small, long-lived
// gRPC objects pinned the heap pages around them, so neither free() nor
// malloc_trim could return those pages. jemalloc keeps objects of one size
// class together, so what was freed returns whole pages.
//  - narenas:1: one arena; the threads' caches absorb contention. More arenas
//    each keep their own partly used pages (at 10,000 agents the default,
//    4 per CPU, held 56 KiB per agent and 366 MiB after all left).
//  - tcache_max:1024, tcache_nslots_small_min:8, tcache_nslots_small_max:16:
//    threads cache blocks up to 1 KiB only, at most 16 of each size class
//    (jemalloc's defaults: up to 32 KiB, up to 200 per class). gRPC runs
//    about 20 threads; an idle thread never flushes its cache, and each
//    cached block keeps its whole slab (1-7 pages) resident. With caches up
//    to 4 KiB and 200 blocks the server kept 2.4 MiB of cached blocks, and
//    with them about 14 MiB of slabs, after 10,000 agents had left (45 MiB
//    after all left and the ended run was removed; 35 MiB with these
//    options, idle 18.5 MiB). Caching nothing cost the server 70% more CPU
//    while 10,000 agents connected; these small caches cost none that
//    shows (2.1-2.3 s either way, 3 runs each).
//  - dirty_decay_ms:1000, muzzy_decay_ms:0, background_thread:true: pages
//    freed are returned to the system within about a second, by jemalloc's
//    own thread, even when the server goes idle afterwards (MADV_DONTNEED,
//    so the RSS drops at once).
extern "C" {
// Read by jemalloc at its initialisation (before main).
// NOLINTNEXTLINE: the name is jemalloc's.
extern const char* malloc_conf;
const char* malloc_conf = "narenas:1,tcache_max:1024,tcache_nslots_small_min:8,tcache_nslots_small_max:16,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true";
}
