# The CUDA and NCCL path, included from the top-level CMakeLists.txt after pn_comm and
# pn_kernels exist. Only does something when PN_HAVE_CUDA is ON.
#   * pn_kernels: nvcc flags for kernels/cuda/*.cu (sources added by the top-level glob).
#   * pn_comm: comm/nccl_comm.cpp and PN_HAVE_NCCL when NCCL is found (Debian's libnccl-dev or
#     the CUDA toolkit's copy; NCCL_ROOT overrides the search).
#   * PN_CUDA_TESTS: tests/cuda registers pn_cuda_tests (tests/CMakeLists.txt adds the folder).
set(PN_HAVE_NCCL OFF)
if(PN_CUDA_EMULATE)  # the communicator on the emulation's NCCL (emulator/nccl.cpp)
  set(PN_HAVE_NCCL ON)
  target_sources(pn_comm PRIVATE ${CMAKE_SOURCE_DIR}/comm/nccl_comm.cpp)
  target_compile_definitions(pn_comm PUBLIC PN_HAVE_NCCL=1)
  target_link_libraries(pn_comm PUBLIC pn_cuda_emulate)
  return()
endif()
if(NOT PN_HAVE_CUDA)
  return()
endif()

set_target_properties(pn_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
# --extended-lambda: the element-wise kernels are __device__ lambdas in a grid-stride loop.
# -Xcompile... keeps host-side warnings of .cu files the same as for .cpp files.
target_compile_options(pn_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda --expt-relaxed-constexpr -Xcompiler=-Wall>)
target_link_libraries(pn_kernels PUBLIC CUDA::cublasLt)
message(STATUS "pntrain CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES}")

find_path(NCCL_INCLUDE_DIR NAMES nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(PN_HAVE_NCCL ON)
  target_sources(pn_comm PRIVATE ${CMAKE_SOURCE_DIR}/comm/nccl_comm.cpp)
  target_include_directories(pn_comm PRIVATE ${NCCL_INCLUDE_DIR})
  target_compile_definitions(pn_comm PUBLIC PN_HAVE_NCCL=1)
  target_link_libraries(pn_comm PUBLIC CUDA::cudart PRIVATE ${NCCL_LIBRARY})
endif()
message(STATUS "pntrain NCCL: ${PN_HAVE_NCCL} (${NCCL_LIBRARY})")
