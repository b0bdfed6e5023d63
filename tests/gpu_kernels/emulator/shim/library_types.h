// The emulator's stand-in (cuda_emulator.h): the data types cuBLAS takes.
#pragma once

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16BF = 14,
};
typedef enum cudaDataType_t cudaDataType;
