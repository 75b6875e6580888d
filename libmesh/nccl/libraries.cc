// Finding and loading NCCL and the CUDA driver (nccl/libraries.h).
#include "nccl/libraries.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace meshrun::mesh::internal {
namespace {

namespace fs = std::filesystem;

constexpr char kNccl[] = "libnccl.so.2";
constexpr char kDriver[] = "libcuda.so.1";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string LastDlError() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

// The file a handle was loaded from (ld.so's view), or `fallback`.
std::string LoadedPath(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

// The Python prefixes of this process's environment, in search order, each
// once: $VIRTUAL_ENV, $CONDA_PREFIX, the parent of every PATH folder holding
// a python3, $HOME/.local, /usr/local, /usr.
std::vector<fs::path> PythonPrefixes() {
  std::vector<fs::path> out;
  std::set<std::string> seen;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(p, ec);
    if (ec || canonical.empty() || !seen.insert(canonical.string()).second) return;
    out.push_back(canonical);
  };
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (std::string v = Env(var); !v.empty()) add(v);
  }
  for (absl::string_view dir_view : absl::StrSplit(Env("PATH"), ':', absl::SkipEmpty())) {
    const std::string dir(dir_view);
    std::error_code ec;
    // Not resolved: a venv's bin/python3 is a link to the system's python.
    if (fs::exists(fs::path(dir) / "python3", ec)) add(fs::path(dir).parent_path());
  }
  if (std::string home = Env("HOME"); !home.empty()) add(fs::path(home) / ".local");
  add("/usr/local");
  add("/usr");
  return out;
}

// Every existing nvidia/nccl/lib/libnccl.so.2 under the site folders of
// `prefix` (lib/python3*/site-packages, lib/python3*/dist-packages), and in
// `looked` every folder searched.
// Each site folder once (`seen`: canonical paths; /lib leads into /usr/lib).
void PipNcclCandidates(const fs::path& prefix, std::set<std::string>* seen, std::vector<std::string>* files,
                       std::vector<std::string>* looked) {
  std::error_code ec;
  std::vector<fs::path> versions;
  for (fs::directory_iterator it(prefix / "lib", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("python3", 0) == 0) versions.push_back(it->path());
  }
  std::sort(versions.begin(), versions.end());
  for (const fs::path& v : versions) {
    for (const char* site : {"site-packages", "dist-packages"}) {
      const fs::path dir = v / site;
      if (!fs::is_directory(dir, ec)) continue;
      if (!seen->insert(fs::canonical(dir, ec).string()).second) continue;
      looked->push_back((dir / "nvidia/nccl/lib").string());
      const fs::path file = dir / "nvidia/nccl/lib" / kNccl;
      if (fs::exists(file, ec)) files->push_back(file.string());
    }
  }
}

// Opens NCCL as nccl/libraries.h lists. On failure, `why` says where it
// looked and what each place answered.
void* OpenNccl(std::string* why) {
  if (std::string file = Env("MESHRUN_NCCL_LIBRARY"); !file.empty()) {
    void* h = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) *why = absl::StrCat("MESHRUN_NCCL_LIBRARY=", file, " could not be loaded: ", LastDlError());
    return h;
  }
  if (void* h = ::dlopen(kNccl, RTLD_NOW | RTLD_NOLOAD); h != nullptr) return h;
  if (void* h = ::dlopen(kNccl, RTLD_NOW | RTLD_LOCAL); h != nullptr) return h;
  std::string loader_error = LastDlError();
  std::vector<std::string> files, looked;
  std::set<std::string> seen;
  for (const fs::path& prefix : PythonPrefixes()) PipNcclCandidates(prefix, &seen, &files, &looked);
  std::vector<std::string> failures;
  for (const std::string& f : files) {
    if (void* h = ::dlopen(f.c_str(), RTLD_NOW | RTLD_LOCAL); h != nullptr) return h;
    failures.push_back(absl::StrCat(f, ": ", LastDlError()));
  }
  *why = absl::StrCat("NCCL (", kNccl, ") was not found on the library path (LD_LIBRARY_PATH, ld.so's cache: ",
                      loader_error, ") nor as pip's NCCL wheel in ",
                      looked.empty() ? "any Python environment (none found)" : absl::StrJoin(looked, ", "),
                      failures.empty() ? "" : absl::StrCat(" (found but not loaded: ", absl::StrJoin(failures, "; "), ")"),
                      "; install NCCL 2.18 or newer, or set MESHRUN_NCCL_LIBRARY to its ", kNccl);
  return nullptr;
}

// Resolves `name` in `handle` into `*fn`; false (with `missing` extended)
// when the library lacks it.
template <typename F>
bool Resolve(void* handle, const char* name, F* fn, std::vector<std::string>* missing) {
  *fn = reinterpret_cast<F>(::dlsym(handle, name));
  if (*fn == nullptr) missing->push_back(name);
  return *fn != nullptr;
}

// What one search found: the libraries, and why NCCL, or NCCL and the
// driver together, cannot be used (empty when they can).
struct Loaded {
  std::unique_ptr<CudaLibraries> libs = std::make_unique<CudaLibraries>();
  std::string nccl_problem;
  std::string problem;
};

Loaded Load() {
  Loaded out;
  CudaLibraries* libs = out.libs.get();
  std::vector<std::string> problems;

  std::string nccl_why;
  void* nccl = OpenNccl(&nccl_why);
  if (nccl == nullptr) {
    problems.push_back(nccl_why);
  } else {
    libs->nccl_path = LoadedPath(nccl, kNccl);
    NcclApi& n = libs->nccl;
    std::vector<std::string> missing;
    Resolve(nccl, "ncclGetVersion", &n.GetVersion, &missing);
    Resolve(nccl, "ncclGetErrorString", &n.GetErrorString, &missing);
    Resolve(nccl, "ncclGetUniqueId", &n.GetUniqueId, &missing);
    Resolve(nccl, "ncclCommInitRankConfig", &n.CommInitRankConfig, &missing);
    Resolve(nccl, "ncclCommSplit", &n.CommSplit, &missing);
    Resolve(nccl, "ncclCommGetAsyncError", &n.CommGetAsyncError, &missing);
    Resolve(nccl, "ncclCommDestroy", &n.CommDestroy, &missing);
    Resolve(nccl, "ncclCommAbort", &n.CommAbort, &missing);
    Resolve(nccl, "ncclGroupStart", &n.GroupStart, &missing);
    Resolve(nccl, "ncclGroupEnd", &n.GroupEnd, &missing);
    Resolve(nccl, "ncclAllReduce", &n.AllReduce, &missing);
    Resolve(nccl, "ncclAllGather", &n.AllGather, &missing);
    Resolve(nccl, "ncclReduceScatter", &n.ReduceScatter, &missing);
    Resolve(nccl, "ncclBroadcast", &n.Broadcast, &missing);
    int code = 0;
    if (n.GetVersion != nullptr && n.GetVersion(&code) == ncclSuccess) {
      // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9.
      libs->nccl_version = absl::StrCat(code / 10000, ".", code / 100 % 100, ".", code % 100);
    }
    if (!missing.empty()) {
      problems.push_back(absl::StrCat("NCCL ", libs->nccl_version.empty() ? "" : libs->nccl_version + " ", "at ",
                                      libs->nccl_path, " lacks ", absl::StrJoin(missing, ", "),
                                      " (the NCCL backend needs NCCL 2.18 or newer)"));
    }
  }

  const size_t nccl_problems = problems.size();  // 0 or 1

  void* driver = ::dlopen(kDriver, RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    problems.push_back(absl::StrCat("the CUDA driver (", kDriver, ") was not found on the library path: ",
                                    LastDlError(), " (no NVIDIA driver on this host?)"));
  } else {
    libs->driver_path = LoadedPath(driver, kDriver);
    DriverApi& d = libs->driver;
    std::vector<std::string> missing;
    Resolve(driver, "cuInit", &d.Init, &missing);
    Resolve(driver, "cuGetErrorName", &d.GetErrorName, &missing);
    Resolve(driver, "cuDeviceGetCount", &d.DeviceGetCount, &missing);
    Resolve(driver, "cuDeviceGet", &d.DeviceGet, &missing);
    Resolve(driver, "cuDeviceGetPCIBusId", &d.DeviceGetPCIBusId, &missing);
    Resolve(driver, "cuDevicePrimaryCtxRetain", &d.DevicePrimaryCtxRetain, &missing);
    Resolve(driver, "cuCtxSetCurrent", &d.CtxSetCurrent, &missing);
    Resolve(driver, "cuMemAlloc_v2", &d.MemAlloc, &missing);
    Resolve(driver, "cuMemFree_v2", &d.MemFree, &missing);
    Resolve(driver, "cuStreamSynchronize", &d.StreamSynchronize, &missing);
    if (!missing.empty()) {
      problems.push_back(absl::StrCat("the CUDA driver at ", libs->driver_path, " lacks ", absl::StrJoin(missing, ", ")));
    }
  }

  if (nccl_problems > 0) out.nccl_problem = absl::StrCat("device type 'cuda': ", problems.front());
  if (!problems.empty()) {
    std::string found;
    if (nccl != nullptr && problems.size() == 1 && driver == nullptr) {
      found = absl::StrCat(" (NCCL ", libs->nccl_version, " was found: ", libs->nccl_path, ")");
    }
    out.problem = absl::StrCat("device type 'cuda': ", absl::StrJoin(problems, "; and "), found);
  }
  return out;
}

const Loaded& Libraries() {
  static const Loaded* loaded = new Loaded(Load());
  return *loaded;
}

}  // namespace

absl::StatusOr<const CudaLibraries*> LoadCudaLibraries() {
  const Loaded& l = Libraries();
  if (!l.problem.empty()) return absl::FailedPreconditionError(l.problem);
  return l.libs.get();
}

absl::StatusOr<const CudaLibraries*> LoadNccl() {
  const Loaded& l = Libraries();
  if (!l.nccl_problem.empty()) return absl::FailedPreconditionError(l.nccl_problem);
  return l.libs.get();
}

std::string DriverErrorName(const DriverApi& driver, CUresult r) {
  const char* name = nullptr;
  if (driver.GetErrorName != nullptr && driver.GetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) {
    return absl::StrCat(name, " (", static_cast<int>(r), ")");
  }
  // The toolkit's stub libcuda.so names no error, not even its own.
  if (r == CUDA_ERROR_STUB_LIBRARY) return "CUDA_ERROR_STUB_LIBRARY (34: the CUDA toolkit's stub, not a driver)";
  return absl::StrCat("CUDA driver error ", static_cast<int>(r));
}

}  // namespace meshrun::mesh::internal
