# Read by CMake right after llama.cpp's own project() call, when .ci/run builds llama-cpp-python
# (-DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>).
#
# llama-cpp-python's CMakeLists forces LLAMA_BUILD_COMMON ON in the cache because its multimodal library (mtmd)
# needs llama.cpp's "common" library. The lab never builds mtmd (LLAVA_BUILD=OFF) and the Python package loads
# only libllama and ggml, so common (~35 C++ files, most of them heavy with nlohmann/json) and cpp-httplib would
# be compiled for nothing. Without them the build took 291 s instead of 784 s on the same 2-core box (from a cold
# cache, beside .ci/run's installs), and the wheel is 14 MB instead of 19 MB.
# A normal variable set here, in llama.cpp's directory scope, shadows the forced cache entry: its
# option(LLAMA_BUILD_COMMON ...) leaves it be (policy CMP0077, NEW under its cmake_minimum_required) and
# `if (LLAMA_BUILD_COMMON)` reads OFF.
set(LLAMA_BUILD_COMMON OFF)
