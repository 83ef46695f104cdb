# Optional parts of Loom. Each is compiled in when found; none is required.
# The summary printed at the end of configuration says what was found.
set(LOOM_FEATURES "host")
set(LOOM_SUMMARY "")

macro(loom_feature name found detail)
  if(${found})
    string(APPEND LOOM_FEATURES ",${name}")
    list(APPEND LOOM_SUMMARY "  ${name}: yes (${detail})")
  else()
    list(APPEND LOOM_SUMMARY "  ${name}: no")
  endif()
endmacro()

# CUDA: the device kernels (src/kernels/cuda/reduce.cu) are compiled by the nvcc that CMake's
# CUDA language finds (check_language), into one fatbin that libloom carries and loads through
# the driver at run time; nothing links libcuda or the runtime. LOOM_CUDA=OFF leaves them out.
option(LOOM_CUDA "Build the device kernels when nvcc is found" ON)
include(CheckLanguage)
if(LOOM_CUDA)
  check_language(CUDA)
endif()
find_package(CUDAToolkit QUIET)
if(LOOM_CUDA AND CMAKE_CUDA_COMPILER)
  set(LOOM_HAVE_CUDA_KERNELS TRUE)
else()
  set(LOOM_HAVE_CUDA_KERNELS FALSE)
endif()
loom_feature(cuda LOOM_HAVE_CUDA_KERNELS
             "${CMAKE_CUDA_COMPILER}: kernels for sm_80, sm_90 and compute_90, no CUDA executor yet")

find_library(LOOM_IBVERBS_LIB ibverbs)
find_path(LOOM_IBVERBS_INC infiniband/verbs.h)
if(LOOM_IBVERBS_LIB AND LOOM_IBVERBS_INC)
  set(LOOM_HAVE_VERBS TRUE)
else()
  set(LOOM_HAVE_VERBS FALSE)
endif()
loom_feature(verbs LOOM_HAVE_VERBS "libibverbs, transport not built yet")

find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(LOOM_UCX QUIET ucx)
  pkg_check_modules(LOOM_HWLOC QUIET hwloc)
endif()
loom_feature(ucx LOOM_UCX_FOUND "UCX ${LOOM_UCX_VERSION}, transport not built yet")
loom_feature(hwloc LOOM_HWLOC_FOUND "hwloc ${LOOM_HWLOC_VERSION}, topology not built yet")

find_package(MPI QUIET COMPONENTS C)
loom_feature(mpi MPI_C_FOUND "${MPI_C_LIBRARY_VERSION_STRING}")

function(loom_print_summary)
  message(STATUS "Loom ${PROJECT_VERSION} optional parts:")
  foreach(line IN LISTS LOOM_SUMMARY)
    message(STATUS "${line}")
  endforeach()
  message(STATUS "  tests: ${LOOM_BUILD_TESTS}, werror: ${LOOM_WERROR}, sanitize: '${LOOM_SANITIZE}'")
endfunction()
