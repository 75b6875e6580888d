// Keeps the portable build on glibc 2.34 (cmake/MeshrunPortable.cmake,
// docs/install.md). GCC 12's static C++ runtime, built against Debian 12's
// glibc 2.36, calls two functions newer than 2.34: arc4random (2.36, in
// std::random_device) and _dl_find_object (2.35, in the exception
// unwinder). Every portable link passes -Wl,--wrap=arc4random
// -Wl,--wrap=_dl_find_object and this object, so those calls come here:
// glibc's own function when the running glibc has it (looked up with dlsym
// once, when the program or library is loaded), else the same answer from
// older functions (2.34 or earlier).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

static uint32_t (*real_arc4random)(void);
static int (*real_dl_find_object)(void*, struct dl_find_object*);

__attribute__((constructor)) static void find_glibc_functions(void) {
  real_arc4random = (uint32_t (*)(void))dlsym(RTLD_DEFAULT, "arc4random");
  // MESHRUN_EMULATE_DL_FIND_OBJECT=1: the older way on any glibc (tests/package/).
  if (!getenv("MESHRUN_EMULATE_DL_FIND_OBJECT")) {
    real_dl_find_object = (int (*)(void*, struct dl_find_object*))dlsym(RTLD_DEFAULT, "_dl_find_object");
  }
}

// 32 random bits from the kernel, as glibc's arc4random gives (getrandom,
// glibc 2.25). A failure other than an interrupted call aborts, as glibc's
// does when it has no randomness.
uint32_t __wrap_arc4random(void) {
  if (real_arc4random) return real_arc4random();
  uint32_t value;
  for (;;) {
    ssize_t n = getrandom(&value, sizeof value, 0);
    if (n == (ssize_t)sizeof value) return value;
    if (n < 0 && errno != EINTR) abort();
  }
}

struct find_request {
  uintptr_t pc;
  struct dl_find_object* result;
  int found;
};

// The loaded object whose segments hold request->pc: its mapped range and
// its PT_GNU_EH_FRAME segment (what the unwinder reads).
static int find_object(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct find_request* request = data;
  uintptr_t low = UINTPTR_MAX, high = 0;
  const void* eh_frame = NULL;
  int holds_pc = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* phdr = &info->dlpi_phdr[i];
    if (phdr->p_type == PT_LOAD) {
      uintptr_t start = info->dlpi_addr + phdr->p_vaddr, end = start + phdr->p_memsz;
      if (start < low) low = start;
      if (end > high) high = end;
      if (request->pc >= start && request->pc < end) holds_pc = 1;
    } else if (phdr->p_type == PT_GNU_EH_FRAME) {
      eh_frame = (const void*)(info->dlpi_addr + phdr->p_vaddr);
    }
  }
  if (!holds_pc) return 0;
  request->result->dlfo_flags = 0;
  request->result->dlfo_map_start = (void*)low;
  request->result->dlfo_map_end = (void*)high;
  request->result->dlfo_link_map = NULL;
  request->result->dlfo_eh_frame = (void*)eh_frame;
  request->found = 1;
  return 1;
}

// _dl_find_object's contract: 0 and *result filled for an address inside a
// loaded object, -1 otherwise (dl_iterate_phdr: glibc 2.2.5).
static int meshrun_emulated_dl_find_object(void* pc, struct dl_find_object* result) {
  struct find_request request = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(find_object, &request);
  return request.found ? 0 : -1;
}

int __wrap__dl_find_object(void* pc, struct dl_find_object* result) {
  if (real_dl_find_object) return real_dl_find_object(pc, result);
  return meshrun_emulated_dl_find_object(pc, result);
}
