/* cuda_elem: the element types of the CUDA kernels (fp32, bf16, fp16) widened to fp32 and
 * rounded back, shared by the kernel files of engine/cuda/ so that every kernel converts the
 * same way: to_f(x) widens; from_f<T>(v) rounds to nearest even. CUDA C++, device code only;
 * the host emulator (tests/cuda_emu) compiles it with the host versions of the intrinsics. */
#ifndef TWIN_CUDA_ELEM_CUH
#define TWIN_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v) {
    return __float2half_rn(v);
}

}  // namespace

#endif
