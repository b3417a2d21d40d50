// The macros that expand the entries of kernels/ops.inc, PN_OP(name, ret, (params), (args),
// types, cuda, cpu_file), into declarations, dispatch, instantiations and CUDA twins. Each
// includer of ops.inc defines PN_OP as one of the PN_OPS_* below (or its own), includes the list
// and undefines PN_OP. The `types` and `cuda` fields select a macro by name (PN_OPS_CAT), so a
// misspelt field is a compile error naming the macro it did not find.
#pragma once

#define PN_OPS_CAT_(a, b) a##b
#define PN_OPS_CAT(a, b) PN_OPS_CAT_(a, b)
#define PN_OPS_UNPAREN(...) __VA_ARGS__

// ---- declarations: `template <class T> ret name(params);` or `ret name(params);` ----------------
#define PN_OPS_TEMPLATE_float_double template <class T>
#define PN_OPS_TEMPLATE_fixed
#define PN_OPS_DECLARE(name, ret, params, args, types, cuda, file) \
  PN_OPS_CAT(PN_OPS_TEMPLATE_, types) ret name params;

// ---- explicit instantiations, with T defined as a macro (float, then double) -------------------
// Every templated operation (kernels/dispatch.cpp), or those whose cpu_file is this file's (a CPU
// file defines PN_OPS_THIS_FILE_<its name> as PN_OPS_PROBE; see kernels/instantiate.inc).
#define PN_OPS_INSTANTIATE_float_double(name, ret, params) template ret name<T> params;
#define PN_OPS_INSTANTIATE_fixed(name, ret, params)
#define PN_OPS_INSTANTIATE(name, ret, params, args, types, cuda, file) \
  PN_OPS_CAT(PN_OPS_INSTANTIATE_, types)(name, ret, params)
#define PN_OPS_PROBE ~, 1
#define PN_OPS_SECOND_(a, b, ...) b
#define PN_OPS_SECOND(...) PN_OPS_SECOND_(__VA_ARGS__)
#define PN_OPS_IS_THIS_FILE(file) PN_OPS_SECOND(PN_OPS_CAT(PN_OPS_THIS_FILE_, file), 0, ~)
#define PN_OPS_IF_1(...) __VA_ARGS__
#define PN_OPS_IF_0(...)
#define PN_OPS_INSTANTIATE_IN_THIS_FILE(name, ret, params, args, types, cuda, file) \
  PN_OPS_CAT(PN_OPS_IF_, PN_OPS_IS_THIS_FILE(file))(                               \
      PN_OPS_INSTANTIATE(name, ret, params, args, types, cuda, file))

// ---- CUDA twins' declarations (pn::cuda), with T defined as float, then as double ---------------
#define PN_OPS_CUDA_stream(name, ret, params) ret name(PN_OPS_UNPAREN params, cudaStream_t s);
#define PN_OPS_CUDA_stream_double PN_OPS_CUDA_stream
#define PN_OPS_CUDA_cublas(name, ret, params) ret name(Blas& b, PN_OPS_UNPAREN params);
#define PN_OPS_CUDA_cublas_by_hand PN_OPS_CUDA_cublas
#define PN_OPS_CUDA_composite(name, ret, params)
#define PN_OPS_CUDA_TWIN(name, ret, params, args, types, cuda, file) \
  PN_OPS_CAT(PN_OPS_CUDA_, cuda)(name, ret, params)
// The double twins: only where cuda is stream_double.
#define PN_OPS_CUDA_DOUBLE_stream(name, ret, params)
#define PN_OPS_CUDA_DOUBLE_stream_double PN_OPS_CUDA_stream
#define PN_OPS_CUDA_DOUBLE_cublas(name, ret, params)
#define PN_OPS_CUDA_DOUBLE_cublas_by_hand(name, ret, params)
#define PN_OPS_CUDA_DOUBLE_composite(name, ret, params)
#define PN_OPS_CUDA_DOUBLE_TWIN(name, ret, params, args, types, cuda, file) \
  PN_OPS_CAT(PN_OPS_CUDA_DOUBLE_, cuda)(name, ret, params)
