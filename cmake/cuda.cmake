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

# cuDNN's fused attention (kernels/cuda/cudnn_sdpa.cpp) through the cuDNN frontend's headers
# (header-only; `launcher/pn cudnn-frontend` puts PyPI's copy in .deps/cudnn-frontend, and
# CUDNN_FRONTEND_ROOT names another) and cudnn.h; cuDNN itself is opened at run time, so
# nothing here links it. Without the headers the file builds as "unsupported" and the
# attention is materialized.
target_sources(pn_kernels PRIVATE ${CMAKE_SOURCE_DIR}/kernels/cuda/cudnn_sdpa.cpp)
find_path(CUDNN_FRONTEND_INCLUDE_DIR NAMES cudnn_frontend.h
  HINTS ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT} ${CMAKE_SOURCE_DIR}/.deps/cudnn-frontend
  PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(CUDNN_INCLUDE_DIR NAMES cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{CUDNN_ROOT}
  PATH_SUFFIXES include)
set(PN_HAVE_CUDNN_FRONTEND OFF)
if(CUDNN_FRONTEND_INCLUDE_DIR AND CUDNN_INCLUDE_DIR)
  set(PN_HAVE_CUDNN_FRONTEND ON)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/kernels/cuda/cudnn_sdpa.cpp PROPERTIES
    INCLUDE_DIRECTORIES "${CUDNN_FRONTEND_INCLUDE_DIR};${CUDNN_INCLUDE_DIR}"
    COMPILE_DEFINITIONS
      "PN_HAVE_CUDNN_FRONTEND=1;NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING;CUDNN_FRONTEND_SKIP_JSON_LIB"
    COMPILE_OPTIONS "-Wno-unused-function;-Wno-missing-field-initializers")
  target_link_libraries(pn_kernels PUBLIC ${CMAKE_DL_LIBS})
endif()
message(STATUS "pntrain cuDNN attention: ${PN_HAVE_CUDNN_FRONTEND} (frontend ${CUDNN_FRONTEND_INCLUDE_DIR})")

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
