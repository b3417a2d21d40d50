# -DPN_CUDA_EMULATE=ON: kernels/cuda/*.cu compiled as host C++ against the CPU emulation of the
# CUDA runtime, cuBLAS and CUB in this folder, so that the CUDA path (and its tests) run without
# nvcc or a GPU; NCCL too (cmake/cuda.cmake adds comm/nccl_comm.cpp). Included from the top-level CMakeLists.txt in place of the CUDA toolkit; sets
# PN_HAVE_CUDA. PN_CUDA_EMULATE_SANITIZE=address|thread builds everything with that sanitizer.
find_package(Threads REQUIRED)
set(PN_EMULATE_DIR ${CMAKE_CURRENT_LIST_DIR})

set(PN_CUDA_EMULATE_SANITIZE "" CACHE STRING "Sanitizer of the emulation build: address, thread or empty")
if(PN_CUDA_EMULATE_SANITIZE)
  add_compile_options(-fsanitize=${PN_CUDA_EMULATE_SANITIZE} -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${PN_CUDA_EMULATE_SANITIZE})
endif()

add_library(pn_cuda_emulate ${PN_EMULATE_DIR}/runtime.cpp ${PN_EMULATE_DIR}/blocks.cpp
                            ${PN_EMULATE_DIR}/cublas.cpp ${PN_EMULATE_DIR}/nccl.cpp
                            ${PN_EMULATE_DIR}/cudnn_sdpa.cpp)
# The emulation's headers stand in for cuda_runtime.h, cublas_v2.h, cuda_bf16.h, nccl.h and CUB's;
# cudnn_sdpa.cpp for cuDNN's attention (kernels/cuda/cudnn_sdpa.h).
target_include_directories(pn_cuda_emulate PUBLIC ${PN_EMULATE_DIR}
                           PRIVATE ${OPENBLAS_INCLUDE} ${CMAKE_SOURCE_DIR})
target_compile_definitions(pn_cuda_emulate PUBLIC PN_CUDA_EMULATE=1)
target_link_libraries(pn_cuda_emulate PUBLIC Threads::Threads PRIVATE ${OPENBLAS_LIB})

# The names the rest of the build links against, as find_package(CUDAToolkit) would give them.
foreach(lib cudart cublas cublasLt)
  add_library(CUDA::${lib} INTERFACE IMPORTED)
  set_target_properties(CUDA::${lib} PROPERTIES INTERFACE_LINK_LIBRARIES pn_cuda_emulate)
endforeach()

# .cu files as C++: -x c++ (g++ takes an unknown suffix for a linker input), no FMA contraction
# (the kernels' explicitly rounded operations stay separate, as nvcc keeps __fmul_rn/__fadd_rn),
# and no warning for nvcc's #pragma unroll.
file(GLOB PN_EMULATED_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
set_source_files_properties(${PN_EMULATED_CU} PROPERTIES LANGUAGE CXX
  COMPILE_OPTIONS "-x;c++;-ffp-contract=off;-Wno-unknown-pragmas")

set(PN_HAVE_CUDA ON)
