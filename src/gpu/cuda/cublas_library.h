// cuBLAS and cuBLASLt are loaded with dlopen when the CUDA backend is first
// made, not linked. libcublasLt.so.13 is 540 MB: linking it made every
// maestro-run invocation — `--help`, `--check`, `--simulate` on a laptop —
// spend ~0.10 s and ~200 MB in the dynamic loader before main
// (docs/PERFORMANCE.md §3). cublas_library.cpp defines the cuBLAS(Lt) entry
// points the backend calls (the 19 names `nm -u` lists for maestro_cuda) as
// forwarders to the loaded library's symbols, so the backend's code calls
// cuBLAS as usual.
#pragma once

#include <string>

namespace maestro {

// Loads libcublas.so.<major> and libcublasLt.so.<major> (the toolkit's
// major version; by soname, then from the toolkit's library folder) once.
// Throws CudaError naming the library and the loader's reason when it
// cannot. Thread-safe; later calls return at once.
void load_cublas();

// Whether load_cublas has succeeded in this process.
bool cublas_loaded();

// The file a loaded entry point comes from ("" when not loaded), from
// dladdr: for the tests and for error messages.
std::string cublas_symbol_origin(const char* symbol);

}  // namespace maestro
