#pragma once
// PARITY_HD marks code that nvcc compiles for the device and for the host and
// that the host compiler (the twins, no CUDA) compiles as plain C++: the one
// source of each kernel's arithmetic, so a kernel and its host twin agree bit
// for bit.
#if defined(__CUDACC__)
#define PARITY_HD __host__ __device__
#else
#define PARITY_HD
#endif
