# Install components and CPack's Debian packages (scripts/package.sh runs both;
# docs/install.md).
#   meshrun               bin/meshrun, bin/meshrun-worker-shim, libmesh's shared library,
#                         the licences of what they link in
#   meshrun-dev           libmesh's headers, CMake package, .so link and static library
#   meshrun-nccl          libmesh's NCCL backend (the archive only: Debian has no NCCL)
#   meshrun-absl          Abseil's headers and static library (the archive only; the Debian package depends on
#                         libabsl-dev)
#   meshrun-debian, meshrun-dev-debian
#                         Debian-only files: changelogs, meshrun-dev's copyright, lintian overrides,
#                         the systemd units (/usr/lib/systemd/system, ExecStart=/usr/bin/meshrun)
#   meshrun-share         the archive only: deploy/ as share/meshrun/deploy/ (the container recipe,
#                         the systemd units and their environment files, the Kubernetes manifests,
#                         the Slurm scripts), and the examples (share/meshrun/examples/; meshrun-dev
#                         has them in /usr/share/doc/meshrun-dev/examples/)
include(GNUInstallDirs)

set(MESHRUN_MAINTAINER "meshrun developers <meshrun@example.org>" CACHE STRING
    "Maintainer named in the Debian packages")

# Licences of what the programs link in: Debian's copyright files, and the
# source tarballs' own for what is built here.
set(_doc ${CMAKE_INSTALL_DATAROOTDIR}/doc/meshrun)
set(_licenses ${CMAKE_BINARY_DIR}/licenses)
set(_debian_docs
  grpc:libgrpc29 protobuf:libprotobuf32 abseil:libabsl20220623 openssl:libssl3 c-ares:libc-ares2 re2:libre2-9
  zlib:zlib1g hwloc:libhwloc15 jemalloc:libjemalloc2 spdlog:libspdlog-dev fmt:libfmt-dev cli11:libcli11-dev
  nlohmann-json:nlohmann-json3-dev libstdc++:gcc-12-base)
foreach(pair ${_debian_docs})
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 name)
  list(GET pair 1 pkg)
  if(EXISTS /usr/share/doc/${pkg}/copyright)
    configure_file(/usr/share/doc/${pkg}/copyright ${_licenses}/${name}.copyright COPYONLY)
  endif()
endforeach()
if(MESHRUN_PORTABLE)
  configure_file(${meshrun_gloo_SOURCE_DIR}/LICENSE ${_licenses}/gloo.copyright COPYONLY)
  configure_file(${meshrun_prometheus_SOURCE_DIR}/LICENSE ${_licenses}/prometheus-cpp.copyright COPYONLY)
  configure_file(${meshrun_civetweb_SOURCE_DIR}/LICENSE.md ${_licenses}/civetweb.copyright COPYONLY)
endif()
install(DIRECTORY ${_licenses}/ DESTINATION ${_doc}/third-party COMPONENT meshrun)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright DESTINATION ${_doc} COMPONENT meshrun)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/copyright DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/meshrun-dev
        COMPONENT meshrun-dev-debian)

# The manual pages, made from meshrun's --help (packaging/man-pages.sh, with
# help2man), and the guides.
find_program(MESHRUN_HELP2MAN help2man)
if(MESHRUN_HELP2MAN)
  set(_man ${CMAKE_BINARY_DIR}/man)
  set(_pages meshrun meshrun-server meshrun-status meshrun-mesh)
  list(TRANSFORM _pages PREPEND ${_man}/ OUTPUT_VARIABLE _page_files)
  list(TRANSFORM _page_files APPEND .1.gz)
  add_custom_command(OUTPUT ${_page_files}
    COMMAND bash ${PROJECT_SOURCE_DIR}/packaging/man-pages.sh $<TARGET_FILE:meshrun> ${_man}
    DEPENDS meshrun ${PROJECT_SOURCE_DIR}/packaging/man-pages.sh
    COMMENT "manual pages from meshrun --help")
  add_custom_target(meshrun_man_pages ALL DEPENDS ${_page_files})
  install(FILES ${_page_files} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT meshrun)
else()
  message(STATUS "help2man not found: no manual pages (scripts/install-deps.sh installs it; scripts/package.sh needs them)")
endif()
install(FILES ${PROJECT_SOURCE_DIR}/docs/user-guide.md ${PROJECT_SOURCE_DIR}/docs/deploy.md
        ${PROJECT_SOURCE_DIR}/docs/worker-environment.md ${PROJECT_SOURCE_DIR}/docs/etcd.md
        DESTINATION ${_doc} COMPONENT meshrun)
install(FILES ${PROJECT_SOURCE_DIR}/docs/mesh-guide.md DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/meshrun-dev
        COMPONENT meshrun-dev)

# Debian's changelog (gzip -9n: no name, no time stamp).
string(TIMESTAMP _date "%a, %d %b %Y %H:%M:%S +0000" UTC)
foreach(pkg meshrun meshrun-dev)
  set(PACKAGE ${pkg})
  set(VERSION ${PROJECT_VERSION})
  set(MAINTAINER ${MESHRUN_MAINTAINER})
  set(DATE ${_date})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/changelog.in ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog @ONLY)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog.gz
    COMMAND gzip -9nf -k ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog
    DEPENDS ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog)
  list(APPEND _changelogs ${CMAKE_BINARY_DIR}/debian/${pkg}/changelog.gz)
endforeach()
add_custom_target(meshrun_debian_changelogs ALL DEPENDS ${_changelogs})
install(FILES ${CMAKE_BINARY_DIR}/debian/meshrun/changelog.gz DESTINATION ${_doc} COMPONENT meshrun-debian)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
        RENAME meshrun COMPONENT meshrun-debian)
install(FILES ${CMAKE_BINARY_DIR}/debian/meshrun-dev/changelog.gz DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/meshrun-dev
        COMPONENT meshrun-dev-debian)

# The systemd units, for the .deb: meshrun is /usr/bin/meshrun there, and the
# unit files are installed already.
foreach(unit meshrun-server.service meshrun-replica@.service)
  file(READ ${PROJECT_SOURCE_DIR}/deploy/systemd/${unit} _unit)
  string(REPLACE "/usr/local/bin/meshrun" "/usr/bin/meshrun" _unit "${_unit}")
  string(REGEX REPLACE "#   install -m 0644 [^\n]*\.service /etc/systemd/system/\n"
         "#   (installed by the meshrun package in /usr/lib/systemd/system/)\n" _unit "${_unit}")
  file(WRITE ${CMAKE_BINARY_DIR}/debian/meshrun/systemd/${unit} "${_unit}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/deploy/systemd/${unit})
  install(FILES ${CMAKE_BINARY_DIR}/debian/meshrun/systemd/${unit} DESTINATION lib/systemd/system
          COMPONENT meshrun-debian)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/server.env.example ${PROJECT_SOURCE_DIR}/deploy/systemd/replica.env.example
        DESTINATION ${_doc}/examples COMPONENT meshrun-debian)
# The examples' sources with a CMakeLists.txt that builds them against the
# installed package (packaging/examples/): the archive's share/meshrun/examples/,
# meshrun-dev's /usr/share/doc/meshrun-dev/examples/.
set(_examples ${PROJECT_SOURCE_DIR}/packaging/examples/CMakeLists.txt)
foreach(f two_d_setup.cc hsdp.cc three_d_slicing.cc example_util.h device_fill.h device_fill.cu train.py)
  list(APPEND _examples ${PROJECT_SOURCE_DIR}/examples/${f})
endforeach()
install(FILES ${_examples} DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/meshrun/examples COMPONENT meshrun-share)
install(FILES ${_examples} DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/meshrun-dev/examples COMPONENT meshrun-dev-debian)
# The archive: every deployment file as it is in the repository.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/ DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/meshrun/deploy
        COMPONENT meshrun-share)

# CPack: two Debian packages, meshrun and meshrun-dev (a group each).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meshrun)
set(CPACK_PACKAGE_VENDOR "meshrun")
set(CPACK_PACKAGE_CONTACT "${MESHRUN_MAINTAINER}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL meshrun meshrun-debian meshrun-dev meshrun-dev-debian)
set(CPACK_COMPONENTS_GROUPING ONE_PER_GROUP)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${MESHRUN_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.org/meshrun")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_MESHRUN_PACKAGE_NAME meshrun)
set(CPACK_DEBIAN_MESHRUN_PACKAGE_SECTION devel)
# (The first line is the synopsis; CPack indents the rest.)
set(CPACK_DEBIAN_MESHRUN_DESCRIPTION
  "launcher and runtime for multi-process, multi-host GPU jobs
meshrun is the C++ analogue of PyTorch's torchrun: it starts the workers of
a job on every host, gives them their ranks and torchrun's environment, runs
the rendezvous server and restarts the job when a worker fails. This package
has the meshrun command, its worker shim and libmesh, DeviceMesh for C++
workers over Gloo.")
# libmesh's shared library: a shlibs file, and ldconfig run by a trigger.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
file(WRITE ${CMAKE_BINARY_DIR}/debian/meshrun/triggers "activate-noawait ldconfig\n")
# Maintainer scripts of our own (systemd's daemon-reload for the units): CPack
# then adds no ldconfig call to them (lintian: maintscript-calls-ldconfig).
set(CPACK_DEBIAN_MESHRUN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/debian/meshrun/triggers
    ${PROJECT_SOURCE_DIR}/cmake/debian/postinst ${PROJECT_SOURCE_DIR}/cmake/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_MESHRUN-DEV_PACKAGE_NAME meshrun-dev)
set(CPACK_DEBIAN_MESHRUN-DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_MESHRUN-DEV_PACKAGE_ARCHITECTURE amd64)
# libmesh's headers use Abseil's: those of the Abseil linked into it.
set(CPACK_DEBIAN_MESHRUN-DEV_PACKAGE_DEPENDS
    "meshrun (= ${PROJECT_VERSION}), libabsl-dev (>= 20220623), libabsl-dev (<< 20220624)")
set(CPACK_DEBIAN_MESHRUN-DEV_DESCRIPTION
  "libmesh development files (meshrun)
libmesh is DeviceMesh for C++ workers started by meshrun. This package has
its headers, its CMake package (find_package(meshrun): meshrun::mesh and
meshrun::mesh_static) and its static library.")
include(CPack)
cpack_add_component_group(meshrun)
cpack_add_component_group(meshrun-dev)
cpack_add_component(meshrun GROUP meshrun)
cpack_add_component(meshrun-debian GROUP meshrun)
cpack_add_component(meshrun-dev GROUP meshrun-dev)
cpack_add_component(meshrun-dev-debian GROUP meshrun-dev)
