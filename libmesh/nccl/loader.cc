// libmesh's side of the NCCL plugin (nccl/plugin.h): loads
// libmeshrun_mesh_nccl.so.0 from libmesh's own folder once, and forwards the
// NCCL backend's functions to it.
#include <dlfcn.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "nccl/plugin.h"
#include "nccl/unique_id.h"

namespace meshrun::mesh::internal {
namespace {

// The plugin's path: beside the file this function was loaded from.
std::string PluginPath() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&PluginPath), &info) == 0 || info.dli_fname == nullptr) {
    return MESHRUN_NCCL_PLUGIN;
  }
  return (std::filesystem::path(info.dli_fname).parent_path() / MESHRUN_NCCL_PLUGIN).string();
}

absl::StatusOr<const NcclPlugin*> Load() {
  const std::string path = PluginPath();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::UnimplementedError(absl::StrCat("device type 'cuda': libmesh's NCCL backend ", path,
                                                 " is not installed (this package of meshrun has no NCCL backend)"));
  }
  // Never closed: the backend's groups and callbacks live in it.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return absl::UnavailableError(
        absl::StrCat("device type 'cuda': libmesh's NCCL backend could not be loaded: ", why ? why : path));
  }
  auto entry = reinterpret_cast<const NcclPlugin* (*)()>(::dlsym(handle, kNcclPluginEntry));
  const NcclPlugin* plugin = entry ? entry() : nullptr;
  if (plugin == nullptr || plugin->version != kNcclPluginVersion) {
    return absl::FailedPreconditionError(absl::StrCat("device type 'cuda': ", path, " is not the NCCL backend of this libmesh (",
                                                      plugin ? "version " : "no entry point",
                                                      plugin ? std::to_string(plugin->version) : "", ", expected version ",
                                                      kNcclPluginVersion, ")"));
  }
  return plugin;
}

// The plugin, loaded by the first call; every call gets the first answer.
absl::StatusOr<const NcclPlugin*> Plugin() {
  static const absl::StatusOr<const NcclPlugin*>* loaded = new absl::StatusOr<const NcclPlugin*>(Load());
  return *loaded;
}

}  // namespace

absl::StatusOr<Backend> MakeNcclBackend(std::shared_ptr<Store> store, const World& world, const MeshOptions& options) {
  absl::StatusOr<const NcclPlugin*> p = Plugin();
  if (!p.ok()) return p.status();
  return (*p)->make_backend(std::move(store), world, options);
}

absl::StatusOr<std::string> NcclUniqueIdForTest() {
  absl::StatusOr<const NcclPlugin*> p = Plugin();
  if (!p.ok()) return p.status();
  return (*p)->unique_id_for_test();
}

absl::Status NcclInitOneCommForTest(const std::string& id, int nranks, int rank, absl::Duration timeout,
                                    bool blocking) {
  absl::StatusOr<const NcclPlugin*> p = Plugin();
  if (!p.ok()) return p.status();
  return (*p)->init_one_comm_for_test(id, nranks, rank, timeout, blocking);
}

}  // namespace meshrun::mesh::internal
