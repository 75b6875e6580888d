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
//  - tcache_max:4096: threads cache blocks up to 4 KiB only. gRPC runs many
//    threads, and each one's cache of large blocks stays resident when the
//    thread goes idle (caching none cost the server 70% more CPU while 10,000
//    agents connected).
//  - dirty_decay_ms:1000, muzzy_decay_ms:0, background_thread:true: pages
//    freed are returned to the system within about a second, by jemalloc's
//    own thread, even when the server goes idle afterwards (MADV_DONTNEED,
//    so the RSS drops at once).
extern "C" {
// Read by jemalloc at its initialisation (before main).
// NOLINTNEXTLINE: the name is jemalloc's.
extern const char* malloc_conf;
const char* malloc_conf = "narenas:1,tcache_max:4096,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true";
}
