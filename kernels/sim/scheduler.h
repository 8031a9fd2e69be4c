// What the sim's parts ask the block scheduler (scheduler.cpp) about the thread that is running.
#pragma once

#include <string>

namespace trainrun::sim {

unsigned current_thread();  // linear index within the block
// "kernel NAME, block (x,y,z), thread (x,y,z)" for thread `linear` of the running block.
std::string where(unsigned linear);
// Ends the launch with a kernel failure (reported through cudaGetLastError); never returns.
[[noreturn]] void fail(const std::string& message);

}  // namespace trainrun::sim
