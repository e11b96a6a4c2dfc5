// launch.cuh: STEMDOT_LAUNCH(grid, block, stream, kernel)(args...) enqueues
// kernel<<<grid, block, 0, stream>>>(args...). Written as a macro so that the CPU
// emulator of the kernels (kernels/emu/cuda_runtime.h, which defines it first) can run
// the same launches as calls.
#pragma once

#ifndef STEMDOT_LAUNCH
#define STEMDOT_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<grid, block, 0, stream>>>
#endif
