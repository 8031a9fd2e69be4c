// NVTX for the CPU-executed device (kernels/sim/nvtx.cpp): the two calls the plugin makes, with
// NVTX's signatures. Ranges are checked rather than drawn: each thread's stack of open ranges is
// kept, a pop with none open is an error, and TRAINRUN_SIM_NVTX_SUMMARY=FILE writes at exit how
// many ranges each name opened, the deepest nesting and what was left open or popped unopened.
#pragma once

extern "C" {
// Opens a range on this thread's stack; returns the depth it opened at (0 = outermost).
int nvtxRangePushA(const char* message);
// Closes the innermost range; returns its depth, or -1 (and reports it) when none is open.
int nvtxRangePop();
}
