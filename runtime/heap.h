// The process heap and the operating system.
#pragma once

namespace flick {

// Gives the heap's free pages back to the operating system. Loading a model
// frees many temporaries (converted and quantized copies of weights) of a
// few MB each; glibc keeps those in its heap, where they count as resident
// memory until reused (1.5 GiB after loading Matrix-Game 2.0). Call it after
// a load or a job, not in hot loops: it walks the whole heap.
void release_free_heap();

}  // namespace flick
