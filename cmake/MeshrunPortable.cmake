# MESHRUN_PORTABLE: the shipped programs and libmesh need nothing from the
# system but glibc (docs/install.md). Everything they use is linked
# statically:
# - Debian's static archives (gRPC, Protobuf, Abseil, OpenSSL, c-ares, re2,
#   zlib, hwloc, jemalloc): the imported targets are pointed at the .a files
#   next to the .so files (meshrun_portable_static_deps, called once every
#   target is defined);
# - header-only spdlog and fmt;
# - Gloo and prometheus-cpp (with its civetweb), which Debian ships only as
#   shared libraries: built here from Debian's source tarballs, checked by
#   SHA-256 (downloaded once per build folder; FETCHCONTENT_SOURCE_DIR_<NAME>
#   points at an unpacked copy instead);
# - the C++ runtime (-static-libstdc++ -static-libgcc), with
#   cmake/glibc_compat.c keeping it on glibc 2.34.
# The normal build is portable, so the tests run what is shipped; sanitizer
# and fuzz builds are not (their runtimes need the shared C++ runtime).
include(FetchContent)

# Gloo: bookworm's own version (0.0~git20220518) is no longer in Debian's
# pool; trixie's builds against the same meshrun code (and the non-portable
# builds keep testing bookworm's).
set(MESHRUN_GLOO_URL
  https://deb.debian.org/debian/pool/main/g/gloo/gloo_0.0~git20231202.5354032.orig.tar.xz
  https://snapshot.debian.org/file/33f67b930e60c4d2e398de5c2e831d2d3c9b4369)
set(MESHRUN_GLOO_SHA256 66d6fadb7b07cfcff08f74ae2acfab504e780d6b7536ee74d2011718cda25030)
# prometheus-cpp and civetweb: the versions of Debian 12's packages.
set(MESHRUN_PROMETHEUS_URL
  https://deb.debian.org/debian/pool/main/p/prometheus-cpp/prometheus-cpp_1.0.1.orig.tar.gz
  https://snapshot.debian.org/file/9c12aac2bfbab9283e1061fe09a2e9e76aedfa04)
set(MESHRUN_PROMETHEUS_SHA256 593e028d401d3298eada804d252bc38d8cab3ea1c9e88bcd72095281f85e6d16)
set(MESHRUN_CIVETWEB_URL
  https://deb.debian.org/debian/pool/main/c/civetweb/civetweb_1.15+dfsg.orig.tar.xz
  https://snapshot.debian.org/file/0af8f6c41d6189eea75ecd0b1808866a99ee5d21)
set(MESHRUN_CIVETWEB_SHA256 ec372e9737bc820118bbb735f46a07d41f795814ca0f38bc6e67048e7a460f33)

# Six objects of Debian's Abseil, Protobuf and re2 archives, compiled again
# to go into a shared library (cmake/debian-pic-archives.sh says why): the
# copies of those archives are used in their place.
set(MESHRUN_PIC_DIR ${CMAKE_BINARY_DIR}/_deps/debian-pic)
set(_launcher "${CMAKE_CXX_COMPILER_LAUNCHER}")
if(NOT _launcher)
  set(_launcher "$ENV{CMAKE_CXX_COMPILER_LAUNCHER}")
endif()
message(STATUS "portable: position-independent copies of Debian's archives in ${MESHRUN_PIC_DIR}")
execute_process(COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/debian-pic-archives.sh ${MESHRUN_PIC_DIR} ${CMAKE_CXX_COMPILER} ${_launcher}
                RESULT_VARIABLE _pic_rc OUTPUT_VARIABLE _pic_out ERROR_VARIABLE _pic_out)
if(NOT _pic_rc EQUAL 0)
  message(FATAL_ERROR "cmake/debian-pic-archives.sh failed:\n${_pic_out}")
endif()
# hwloc without udev (cmake/debian-static-hwloc.sh says why).
set(MESHRUN_HWLOC_DIR ${CMAKE_BINARY_DIR}/_deps/debian-hwloc)
message(STATUS "portable: a static hwloc in ${MESHRUN_HWLOC_DIR}")
execute_process(COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/debian-static-hwloc.sh ${MESHRUN_HWLOC_DIR} ${CMAKE_C_COMPILER} ${_launcher}
                RESULT_VARIABLE _pic_rc OUTPUT_VARIABLE _pic_out ERROR_VARIABLE _pic_out)
if(NOT _pic_rc EQUAL 0)
  message(FATAL_ERROR "cmake/debian-static-hwloc.sh failed:\n${_pic_out}")
endif()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/debian-pic-archives.sh
             ${CMAKE_CURRENT_LIST_DIR}/debian-static-hwloc.sh ${CMAKE_CURRENT_LIST_DIR}/debian-source.sh)

# glibc 2.34 at most: the static C++ runtime's calls to two newer glibc
# functions go to cmake/glibc_compat.c instead (it says how). Compiled here,
# linked into every program and shared library (MESHRUN_PORTABLE_LINK_OPTIONS).
set(_compat ${CMAKE_BINARY_DIR}/_deps/glibc_compat.o)
execute_process(COMMAND ${CMAKE_C_COMPILER} -O2 -g -fPIC -Wall -Wextra -Werror -c ${CMAKE_CURRENT_LIST_DIR}/glibc_compat.c -o ${_compat}
                RESULT_VARIABLE _compat_rc OUTPUT_VARIABLE _compat_out ERROR_VARIABLE _compat_out)
if(NOT _compat_rc EQUAL 0)
  message(FATAL_ERROR "compiling cmake/glibc_compat.c failed:\n${_compat_out}")
endif()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/glibc_compat.c)
set(MESHRUN_PORTABLE_LINK_OPTIONS -static-libstdc++ -static-libgcc "LINKER:--wrap=arc4random"
    "LINKER:--wrap=_dl_find_object" ${_compat})

# Static OpenSSL and Protobuf from their find modules.
set(OPENSSL_USE_STATIC_LIBS TRUE)
set(Protobuf_USE_STATIC_LIBS ON)

function(_meshrun_fetch name url sha256)
  FetchContent_Declare(${name} URL ${url} URL_HASH SHA256=${sha256} DOWNLOAD_EXTRACT_TIMESTAMP TRUE ${ARGN})
  FetchContent_GetProperties(${name})
  if(NOT ${name}_POPULATED)
    message(STATUS "portable: ${name} from ${url}")
    FetchContent_Populate(${name})
  endif()
  set(${name}_SOURCE_DIR ${${name}_SOURCE_DIR} PARENT_SCOPE)
  set(${name}_BINARY_DIR ${${name}_BINARY_DIR} PARENT_SCOPE)
endfunction()

# Builds Gloo and prometheus-cpp as static, position-independent libraries:
# targets `gloo`, `prometheus-cpp::core` and `prometheus-cpp::pull`, the names
# Debian's CMake packages give them. Their install rules go to a component
# nothing installs.
function(meshrun_portable_third_party)
  set(CMAKE_INSTALL_DEFAULT_COMPONENT_NAME meshrun-unused-third-party)
  set(CMAKE_POLICY_DEFAULT_CMP0063 NEW)
  set(CMAKE_POLICY_DEFAULT_CMP0048 NEW)
  set(BUILD_SHARED_LIBS OFF)
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)
  set(CMAKE_CXX_VISIBILITY_PRESET hidden)
  set(CMAKE_C_VISIBILITY_PRESET hidden)
  set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)

  _meshrun_fetch(meshrun_gloo "${MESHRUN_GLOO_URL}" ${MESHRUN_GLOO_SHA256})
  set(GLOO_INSTALL OFF CACHE BOOL "" FORCE)
  foreach(opt USE_REDIS USE_IBVERBS USE_NCCL USE_RCCL USE_LIBUV USE_TCP_OPENSSL_LINK USE_TCP_OPENSSL_LOAD USE_CUDA
              BUILD_TEST BUILD_BENCHMARK)
    set(${opt} OFF CACHE BOOL "" FORCE)
  endforeach()
  add_subdirectory(${meshrun_gloo_SOURCE_DIR} ${meshrun_gloo_BINARY_DIR} EXCLUDE_FROM_ALL SYSTEM)
  # Gloo gives its headers (and its generated config.h) to itself only.
  target_include_directories(gloo SYSTEM INTERFACE $<BUILD_INTERFACE:${meshrun_gloo_SOURCE_DIR}>
                                                   $<BUILD_INTERFACE:${meshrun_gloo_BINARY_DIR}>)
  target_compile_options(gloo PRIVATE -w)

  _meshrun_fetch(meshrun_prometheus "${MESHRUN_PROMETHEUS_URL}" ${MESHRUN_PROMETHEUS_SHA256})
  # prometheus-cpp builds the civetweb it finds in 3rdparty/civetweb.
  _meshrun_fetch(meshrun_civetweb "${MESHRUN_CIVETWEB_URL}" ${MESHRUN_CIVETWEB_SHA256}
                 SOURCE_DIR ${meshrun_prometheus_SOURCE_DIR}/3rdparty/civetweb)
  foreach(opt ENABLE_PUSH ENABLE_COMPRESSION ENABLE_TESTING THIRDPARTY_CIVETWEB_WITH_SSL OVERRIDE_CXX_STANDARD_FLAGS
              GENERATE_PKGCONFIG)
    set(${opt} OFF CACHE BOOL "" FORCE)
  endforeach()
  set(ENABLE_PULL ON CACHE BOOL "" FORCE)
  set(USE_THIRDPARTY_LIBRARIES ON CACHE BOOL "" FORCE)
  add_subdirectory(${meshrun_prometheus_SOURCE_DIR} ${meshrun_prometheus_BINARY_DIR} EXCLUDE_FROM_ALL SYSTEM)
  foreach(t core pull civetweb)
    if(TARGET ${t})
      target_compile_options(${t} PRIVATE -w)
    endif()
  endforeach()
  foreach(n meshrun_gloo meshrun_prometheus meshrun_civetweb)
    set(${n}_SOURCE_DIR ${${n}_SOURCE_DIR} PARENT_SCOPE)
  endforeach()
endfunction()

# The imported targets reached from `roots` through their link lists
# (`out_targets`), and the library files behind them: "target|property|path"
# for a location, a bare path or -l<name> for a link-list item (`out_files`).
# Libraries given as glibc's (dl, m, rt, pthread, c) are left out.
function(_meshrun_imported_closure out_targets out_files)
  set(seen "")
  set(todo ${ARGN})
  set(targets "")
  set(files "")
  while(todo)
    list(POP_FRONT todo t)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" t "${t}")
    if(t IN_LIST seen OR t MATCHES "^\\$<" OR t STREQUAL "")
      continue()
    endif()
    list(APPEND seen ${t})
    if(TARGET ${t})
      get_target_property(aliased ${t} ALIASED_TARGET)
      if(aliased)
        list(APPEND todo ${aliased})
        continue()
      endif()
      get_target_property(imported ${t} IMPORTED)
      if(NOT imported)
        continue()
      endif()
      list(APPEND targets ${t})
      get_target_property(type ${t} TYPE)
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        foreach(p IMPORTED_LOCATION IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_NONE
                  IMPORTED_LOCATION_NOCONFIG IMPORTED_LOCATION_DEBUG)
          get_target_property(loc ${t} ${p})
          if(loc)
            list(APPEND files "${t}|${p}|${loc}")
          endif()
        endforeach()
      endif()
      get_target_property(deps ${t} INTERFACE_LINK_LIBRARIES)
      if(deps)
        list(APPEND todo ${deps})
      endif()
    elseif(IS_ABSOLUTE "${t}" OR (t MATCHES "^-l" AND NOT t MATCHES "^-l(dl|m|rt|pthread|c)$"))
      list(APPEND files "${t}")
    endif()
  endwhile()
  set(${out_targets} ${targets} PARENT_SCOPE)
  set(${out_files} ${files} PARENT_SCOPE)
endfunction()

# The static archive for a library (a .so or .a path, or -l<name> searched in
# the multiarch folder): the copy made here (position-independent archives,
# hwloc without udev), else the
# one beside it (lib<name>_pic.a first: the position-independent build where
# Debian ships both), or "".
function(_meshrun_static_for out so)
  if(so MATCHES "^-l(.+)$")
    set(base lib${CMAKE_MATCH_1})
    set(dir /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
  else()
    get_filename_component(dir "${so}" DIRECTORY)
    get_filename_component(name "${so}" NAME)
    string(REGEX REPLACE "\\.(so(\\.[0-9.]*)?|a)$" "" base "${name}")
    string(REGEX REPLACE "_pic$" "" base "${base}")
  endif()
  set(${out} "" PARENT_SCOPE)
  foreach(candidate "${MESHRUN_PIC_DIR}/${base}.a" "${MESHRUN_HWLOC_DIR}/${base}.a" "${dir}/${base}_pic.a" "${dir}/${base}.a")
    if(EXISTS "${candidate}")
      set(${out} "${candidate}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  # The compiler's own (libatomic.a: GCC's folder).
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${base}.a OUTPUT_VARIABLE found
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(IS_ABSOLUTE "${found}" AND EXISTS "${found}")
    set(${out} "${found}" PARENT_SCOPE)
  endif()
endfunction()

# Points every imported library reached from `roots` at its static archive:
# the locations of imported libraries, and the paths and -l flags in
# imported targets' link lists (pkg-config's targets). A shared library
# without a static archive stops the configuration, naming it.
function(meshrun_portable_static_deps)
  _meshrun_imported_closure(targets entries ${ARGN})
  set(missing "")
  foreach(e ${entries})
    if(e MATCHES "^([^|]+)\\|([^|]+)\\|(.+)$")
      set(t ${CMAKE_MATCH_1})
      set(prop ${CMAKE_MATCH_2})
      set(loc ${CMAKE_MATCH_3})
      if(loc MATCHES "\\.(so(\\.[0-9.]*)?|a)$")
        _meshrun_static_for(static "${loc}")
        if(static)
          set_target_properties(${t} PROPERTIES ${prop} "${static}")
          set_property(TARGET ${t} PROPERTY IMPORTED_SONAME)
        else()
          list(APPEND missing "${loc} (${t})")
        endif()
      endif()
    endif()
  endforeach()
  foreach(t ${targets})
    get_target_property(libs ${t} INTERFACE_LINK_LIBRARIES)
    if(NOT libs)
      continue()
    endif()
    set(new "")
    foreach(l ${libs})
      if((IS_ABSOLUTE "${l}" AND l MATCHES "\\.(so(\\.[0-9.]*)?|a)$") OR
         (l MATCHES "^-l" AND NOT l MATCHES "^-l(dl|m|rt|pthread|c)$"))
        _meshrun_static_for(static "${l}")
        if(static)
          set(l "${static}")
        else()
          list(APPEND missing "${l} (in ${t}'s link list)")
        endif()
      endif()
      list(APPEND new "${l}")
    endforeach()
    set_target_properties(${t} PROPERTIES INTERFACE_LINK_LIBRARIES "${new}")
  endforeach()
  if(missing)
    list(REMOVE_DUPLICATES missing)
    list(JOIN missing "\n  " text)
    message(FATAL_ERROR "MESHRUN_PORTABLE: no static archive (lib<name>.a) for:\n  ${text}\n"
                        "Install the -dev package that has it, or configure with -DMESHRUN_PORTABLE=OFF.")
  endif()
endfunction()

# The static archives behind `roots` (absolute paths), after
# meshrun_portable_static_deps: libmesh takes these whole.
function(meshrun_portable_archives out)
  _meshrun_imported_closure(targets entries ${ARGN})
  set(files "")
  foreach(e ${entries})
    string(REGEX REPLACE "^[^|]+\\|[^|]+\\|" "" loc "${e}")
    if(loc MATCHES "\\.a$")
      list(APPEND files "${loc}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES files)
  set(${out} ${files} PARENT_SCOPE)
endfunction()
